"""Models and drafters shared by the single-draft decoder tests (not a test module)."""

from __future__ import annotations

import copy

import torch

from tests.conftest import make_tiny_llama


def full_logits(model, ids) -> torch.Tensor:
    """``model``'s logits at every position of ``ids`` (a list) by one full forward pass, no
    cache: the reference the cached paths are checked against."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def perturbed(model, scale: float, seed: int):
    """A copy of ``model`` with Gaussian noise of std ``scale`` added to every weight: a drafter
    that agrees with the target often but not always."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in out.parameters():
            prm.add_(torch.randn(prm.shape, generator=g) * scale)
    return out


def peaked(model, factor: float):
    """Scale the LM head so that next-token distributions are sharper (tiny random models are
    nearly uniform otherwise)."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


def pool(vocab_size: int = 96, peak: float = 1.0, layers: int = 2):
    """Target and a pool of three drafters: unrelated, noisy copy, exact copy of the target.

    The target has no default EOS (its generation config's is removed), so generation runs to
    ``max_new_tokens`` unless a test passes ``eos_token_id``.
    """
    target = peaked(make_tiny_llama(vocab_size, seed=0, num_hidden_layers=layers), peak)
    target.generation_config.eos_token_id = None
    drafters = [
        peaked(make_tiny_llama(vocab_size, seed=1, num_hidden_layers=layers), peak),
        perturbed(target, 0.02, seed=5),
        copy.deepcopy(target),
    ]
    return target, drafters


class UnigramDrafter:
    """A non-HF drafter implementing the Drafter protocol: a fixed next-token distribution."""

    def __init__(self, logits: torch.Tensor, name: str = "unigram") -> None:
        self.logits, self.name, self.vocab_size = logits.float(), name, logits.numel()

    def start(self, prompt_ids):
        pass

    def propose(self, k, sampling, generator=None):
        q = sampling.probs(self.logits).expand(k, -1).contiguous()
        return torch.multinomial(q, 1, generator=generator).view(-1), q

    def extend(self, tokens):
        return self.logits.expand(tokens.numel(), -1).clone()


class RecordingStreamer:
    """transformers' streamer protocol: put(value) then end()."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []
        self.ended = 0

    def put(self, value):
        assert self.ended == 0, "put after end"
        self.values.append(value.clone())

    def end(self):
        self.ended += 1


def exact_continuations(target, prompt: torch.Tensor, n_tokens: int, warp) -> dict:
    """The target's exact law of ``n_tokens``-token continuations of ``prompt`` ``[1, L]``.

    Enumerates every continuation with full forward passes (no KV cache): ``warp`` maps the
    last-position logits ``(B, V)`` to probabilities. Returns ``{tokens: probability}`` over the
    continuations of positive probability.
    """
    probs = {(): 1.0}
    for _ in range(n_tokens):
        prefixes = list(probs)
        batch = torch.cat([prompt.expand(len(prefixes), -1),
                           torch.tensor([list(p) for p in prefixes], dtype=torch.long)
                           .view(len(prefixes), -1)], 1)
        with torch.no_grad():
            p = warp(target(input_ids=batch).logits[:, -1]).double()
        probs = {(*pre, x): probs[pre] * float(p[i, x])
                 for i, pre in enumerate(prefixes) for x in range(p.shape[-1]) if p[i, x] > 0}
    return probs


def chi2_pvalue(samples, exact: dict, n: int) -> float:
    """Chi-square goodness of fit of ``n`` sampled continuations (a Counter) to ``exact``;
    cells with expected count < 5 are pooled into one. A sample outside the support of
    ``exact`` gives p = 0."""
    import numpy as np
    from scipy.stats import chisquare

    if any(c not in exact for c in samples):
        return 0.0
    big = [c for c, pr in exact.items() if pr * n >= 5]
    obs = [samples.get(c, 0) for c in big]
    exp = [exact[c] * n for c in big]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp > 0:
        obs.append(rest_obs)
        exp.append(rest_exp)
    exp = np.array(exp) * (sum(obs) / sum(exp))
    return float(chisquare(obs, exp).pvalue)
