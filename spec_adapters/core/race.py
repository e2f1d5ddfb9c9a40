"""The exponential race: plain decoding's draw, and drafting with its noise ahead of time.

``torch.multinomial(p, 1, generator=g)`` on a row ``p`` (the draw of transformers'
``generate(do_sample=True)``) is an exponential race: it draws ``E ~ Exp(1)^V`` from ``g``, a
tensor like ``p``, and returns

.. math:: t = \\arg\\max_x p(x) / E(x),

which is distributed as ``p`` (``E(x)/p(x)`` is exponential with rate ``p(x)``, and the first
of independent exponential clocks to ring is ``x`` with probability ``p(x) / sum_y p(y)``). So
the noise of the next positions of a seeded request is known before its tokens are:
:class:`PlainNoise` draws it ahead from a copy of the request's generator. A drafter drafting
position ``j`` by the same race over its own ``q_j`` against the same ``E_j`` (:func:`race`)
proposes the token plain decoding draws there whenever ``q_j`` is close to ``p_j``; the coupled
rule (:func:`~spec_adapters.core.coupled.coupled_walk`) keeps it iff it is that token, so the
output is plain decoding's whatever was drafted, and a draft is kept with the race coupling's
probability

.. math:: P(\\arg\\max p/E = \\arg\\max q/E)
          = \\sum_x 1 \\big/ \\sum_y \\max(p_y / p_x, q_y / q_x)

(1 when ``q = p``; a drafter's argmax is kept with probability ``p(argmax q)`` only). The
output needs nothing new to be lossless: the coupled rule emits plain decoding's tokens
whatever was drafted (``python -m proofs_check --only seeded``, "6 seeded identical");
tests/spec_adapters/core/test_race.py checks the race's law, the coupling probability and
:meth:`PlainNoise.sample` against ``torch.multinomial``.
"""

from __future__ import annotations

import torch

from spec_adapters.core.proposal import PointMass, Rows

__all__ = ["NoiseCursor", "PlainNoise", "race"]


def race(q: Rows, noise: torch.Tensor) -> torch.LongTensor:
    """Each row's winner of the exponential race ``argmax_x q(x) / E(x)`` (``-1`` for a zero
    row: the drafter abstains there).

    Parameters
    ----------
    q : Rows
        Any form, lead ``(..., m)``.
    noise : torch.Tensor
        ``(m, V)`` (or ``(V,)`` for one row) positive exponentials, broadcast over the lead.

    Returns
    -------
    torch.LongTensor
        The lead's shape: a point mass's own token, else the race's winner.
    """
    if isinstance(q, PointMass):
        return q.tokens
    probs = q.dense()
    score = probs / noise.to(probs.device, probs.dtype)
    return torch.where(probs.sum(-1) > 0, score.argmax(-1), -1)


class PlainNoise:
    """Plain decoding's exponentials for a request's next positions, drawn ahead.

    Position ``j`` counts from the next token the request emits; :meth:`at` draws ``E_j`` from a
    copy of the request's generator (nothing of the generator itself moves), :meth:`sample`
    emits the next token, ``argmax p / E_0`` (``torch.multinomial``'s draw, bit for bit: the
    same exponentials, the same division and argmax), and moves the generator to where that
    draw leaves it; what was emitted with which noise is kept in :attr:`spent` until
    :meth:`sync`.

    Parameters
    ----------
    generator : torch.Generator
        The request's: plain decoding's draws.
    vocab_size : int
    dtype : torch.dtype
        The dtype of the rows plain decoding draws from (``torch.multinomial`` draws its
        exponentials in the row's dtype).
    """

    def __init__(self, generator: torch.Generator, vocab_size: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.generator, self.vocab_size, self.dtype = generator, int(vocab_size), dtype
        self.spent: list[torch.Tensor] = []
        self._copy = torch.Generator(device=generator.device)
        self._ahead: list[tuple[torch.Tensor, torch.Tensor]] = []  # (E_j, state after E_j)
        self._from = generator.get_state()  # the generator's state at position 0

    def sync(self) -> None:
        """Start a round: forget :attr:`spent`; if something else drew from the generator
        since (the request's generator is the caller's), drop the noise drawn ahead."""
        self.spent = []
        state = self.generator.get_state()
        if not torch.equal(state, self._from):
            self._ahead, self._from = [], state

    def at(self, j: int) -> torch.Tensor:
        """``E_j`` ``(V,)``: the exponentials plain decoding draws at position ``j``."""
        while len(self._ahead) <= j:
            self._copy.set_state(self._ahead[-1][1] if self._ahead else self._from)
            e = torch.empty(self.vocab_size, dtype=self.dtype,
                            device=self.generator.device).exponential_(1, generator=self._copy)
            self._ahead.append((e, self._copy.get_state()))
        return self._ahead[j][0]

    def sample(self, p: torch.Tensor) -> int:
        """The next position's token, ``argmax p / E_0`` for the ``(V,)`` warped row ``p``,
        which is ``torch.multinomial(p, 1, generator=generator)``; the generator moves past it."""
        if p.shape != (self.vocab_size,) or p.dtype != self.dtype:
            raise ValueError(f"p must be ({self.vocab_size},) {self.dtype}, got "
                             f"{tuple(p.shape)} {p.dtype}")
        e = self.at(0)
        token = int((p / e).argmax())
        self._from = self._ahead.pop(0)[1]
        self.generator.set_state(self._from)
        self.spent.append(e)
        return token

    def cursor(self) -> NoiseCursor:
        """A drafting pass: position 0 first."""
        return NoiseCursor(self)


class NoiseCursor:
    """One drafting pass over :class:`PlainNoise`: :meth:`draw` races a drafter's row at the
    next position. Passed to a drafter's ``propose`` in place of its generator."""

    def __init__(self, noise: PlainNoise) -> None:
        self.noise, self.position = noise, 0

    def draw(self, q: Rows) -> int:
        """The winner of ``q``'s one-row race against this position's noise (``-1``: a zero
        row); the next call races the next position."""
        token = int(race(q, self.noise.at(self.position))[0])
        self.position += 1
        return token
