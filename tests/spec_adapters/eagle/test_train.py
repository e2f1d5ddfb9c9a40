"""Head training: learns, is deterministic, resumes bit-identically, reports held-out gamma;
token files and checkpoints are read without ever running a pickle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.train import TrainConfig, evaluate_head, load_token_ids, train_head
from tests.spec_adapters.eagle.helpers import peaked_target, sample_corpus

CFG = dict(batch_size=2, seq_len=32, lr=1e-2, draft_vocab_size=48, eval_every=4,
           eval_tokens=256, checkpoint_every=2, seed=3)


@pytest.fixture(scope="module")
def data():
    target = peaked_target()
    corpus = sample_corpus(target, n_seq=6, length=64, seed=1)
    return target, corpus[:5].reshape(-1), corpus[5]


def _state(head):
    return {k: v.clone() for k, v in head.state_dict().items()}


def test_training_is_deterministic_and_resumes_bit_identically(data, tmp_path):
    target, corpus, held = data
    cfg = TrainConfig(steps=6, **CFG)
    a, hist_a = train_head(target, corpus, tmp_path / "a", cfg, heldout=held, progress=False,
                           log=None)
    b, _ = train_head(target, corpus, None, cfg, heldout=held, progress=False, log=None)
    # interrupted after 3 steps, then the same call again continues from the checkpoint
    train_head(target, corpus, tmp_path / "c", cfg, heldout=held, progress=False, log=None,
               stop_after=3)
    assert EagleHead.from_pretrained(tmp_path / "c", target=target) is not None
    c, hist_c = train_head(target, corpus, tmp_path / "c", cfg, heldout=held, progress=False,
                           log=None)
    for k, v in _state(a).items():
        assert torch.equal(v, _state(b)[k]), k
        assert torch.equal(v, _state(c)[k]), k
    assert [h["loss"] for h in hist_a] == [h["loss"] for h in hist_c]
    assert [h["step"] for h in hist_c] == list(range(1, 7))
    assert "gamma_topk" in hist_a[3] and "top1" in hist_a[5]
    # a finished run is not trained further by calling it again
    d, _ = train_head(target, corpus, tmp_path / "a", cfg, progress=False, log=None)
    for k, v in _state(a).items():
        assert torch.equal(v, _state(d)[k]), k
    # another seed gives another head
    e, _ = train_head(target, corpus, None, TrainConfig(steps=6, **{**CFG, "seed": 4}),
                      progress=False, log=None)
    assert not torch.equal(_state(a)["fc.weight"], _state(e)["fc.weight"])


def test_training_improves_held_out_acceptance(data):
    target, corpus, held = data
    head0, _ = train_head(target, corpus, None, TrainConfig(steps=1, **CFG), progress=False,
                          log=None, stop_after=0)
    before = evaluate_head(head0, target, held, seq_len=32, top_k=4)
    head, hist = train_head(target, corpus, None, TrainConfig(steps=80, **CFG),
                            progress=False, log=None)
    after = evaluate_head(head, target, held, seq_len=32, top_k=4)
    print(f"\nheld-out top1 {before['top1']:.3f} -> {after['top1']:.3f}, gamma@4 "
          f"{before['gamma_topk']:.3f} -> {after['gamma_topk']:.3f}")
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert after["gamma_topk"] > before["gamma_topk"] + 0.05
    assert 0 <= after["top1"] <= 1 and 0 <= after["gamma_topk"] <= 1
    assert head.d2t.numel() == 48
    counts = torch.bincount(corpus, minlength=96)
    assert counts[head.d2t].sum() >= torch.sort(counts, descending=True).values[:48].sum()


def test_bad_training_input_is_a_value_error(data):
    target, corpus, _ = data
    with pytest.raises(ValueError, match="seq_len"):
        TrainConfig(seq_len=1)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="fewer than seq_len"):
        train_head(target, corpus[:10], None, TrainConfig(steps=1, **CFG), progress=False)
    with pytest.raises(ValueError, match="intermediate_size must be >= 1"):
        TrainConfig(intermediate_size=0)


def test_a_new_head_takes_the_configured_mlp_width_and_a_head_of_another_is_refused(data):
    target, corpus, _ = data
    own = target.config.intermediate_size
    wide, _ = train_head(target, corpus, None,
                         TrainConfig(steps=1, intermediate_size=3 * own, **CFG), progress=False)
    assert wide.config.intermediate_size == 3 * own
    assert wide.gate_proj.weight.shape[0] == 3 * own
    plain, _ = train_head(target, corpus, None, TrainConfig(steps=1, **CFG), progress=False)
    assert plain.config.intermediate_size == own
    before = _state(plain)
    with pytest.raises(ValueError, match=f"intermediate_size={3 * own}, but the head to "
                                         f"continue has an MLP of {own}"):
        train_head(target, corpus, None, TrainConfig(steps=1, intermediate_size=3 * own, **CFG),
                   head=plain, progress=False)
    assert all(torch.equal(v, before[k]) for k, v in _state(plain).items())  # untouched


def test_command_line_trains_and_resumes(data, tmp_path, capsys):
    from spec_adapters.app.cli import main

    from ..bench_fixtures import make_tokenizer

    target, corpus, held = data
    target.save_pretrained(tmp_path / "target")
    make_tokenizer().save_pretrained(tmp_path / "target")  # a model folder, as load_target reads
    np.save(tmp_path / "corpus.npy", corpus.numpy())
    (tmp_path / "held.txt").write_text(" ".join(map(str, held.tolist())))
    argv = ["train-head", "--corpus", str(tmp_path / "corpus.npy"),
            "--heldout", str(tmp_path / "held.txt"), "--out", str(tmp_path / "head"),
            "--target", str(tmp_path / "target"), "--cache-dir", str(tmp_path / "cache"),
            "--steps", "3", "--batch-size", "2", "--seq-len", "16", "--draft-vocab-size", "32",
            "--eval-every", "3", "--no-progress"]
    assert main(argv) == 0
    assert '"step": 3' in capsys.readouterr().out
    head = EagleHead.from_pretrained(tmp_path / "head", target=target)
    assert head.d2t.numel() == 32
    # the same command with more steps continues from the checkpoint (one more step)
    assert main([a if a != "3" else "4" for a in argv]) == 0
    out = capsys.readouterr().out
    assert '"step": 4' in out
    # a pickled corpus is one clear error line, exit status 2
    torch.save(corpus, tmp_path / "corpus.pt")
    assert main([a if not a.endswith("corpus.npy") else str(tmp_path / "corpus.pt")
                 for a in argv]) == 2
    assert "pickles" in capsys.readouterr().err


class _Payload:
    """Unpickling this writes ``marker``: what a crafted token or checkpoint file could do."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_the_crafted_payload_runs_when_unpickled(tmp_path):
    """The oracle of the two tests below: this payload does run code under plain pickle."""
    pickle.loads(pickle.dumps(_Payload(tmp_path / "marker")))
    assert (tmp_path / "marker").read_text() == "ran"


def test_token_files_are_never_unpickled(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "marker"
    raw = pickle.dumps(_Payload(marker))
    torch.save({"ids": _Payload(marker)}, tmp_path / "ids.pt")
    (tmp_path / "ids.pkl").write_bytes(raw)
    np.save(tmp_path / "ids.npy", np.array([_Payload(marker)], dtype=object))  # a pickle inside
    (tmp_path / "fake.npy").write_bytes(raw)
    (tmp_path / "ids.txt").write_bytes(raw)
    (tmp_path / "ids.safetensors").write_bytes(raw)
    cases = {"ids.pt": "pickles", "ids.pkl": "pickles", "ids.npy": "not a token-id file",
             "fake.npy": "not a token-id file", "ids.txt": "not a token-id file",
             "ids.safetensors": "not a token-id file"}
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message):
            load_token_ids(tmp_path / name)
        assert not marker.exists(), name


def test_token_files_round_trip_and_bad_ids_are_value_errors(tmp_path):
    from safetensors.numpy import save_file

    ids = np.array([[5, 0, 7], [95, 3, 1]], dtype=np.int32)
    np.save(tmp_path / "a.npy", ids)
    save_file({"ids": ids}, str(tmp_path / "a.safetensors"))
    (tmp_path / "a.txt").write_text("5 0 7\n95 3\t1\n")
    for name in ("a.npy", "a.safetensors", "a.txt"):
        got = load_token_ids(tmp_path / name)
        assert got.dtype == torch.long and got.tolist() == [5, 0, 7, 95, 3, 1], name
    np.save(tmp_path / "f.npy", ids.astype(np.float32))
    with pytest.raises(ValueError, match="must be integers, got dtype float32"):
        load_token_ids(tmp_path / "f.npy")
    np.save(tmp_path / "n.npy", -ids)
    with pytest.raises(ValueError, match=">= 0, found -95"):
        load_token_ids(tmp_path / "n.npy")
    save_file({"a": ids, "b": ids}, str(tmp_path / "two.safetensors"))
    with pytest.raises(ValueError, match="holds 2 tensors"):
        load_token_ids(tmp_path / "two.safetensors")
    (tmp_path / "w.txt").write_text("5 six 7")
    with pytest.raises(ValueError, match=r"w\.txt is not a token-id file.*six"):
        load_token_ids(tmp_path / "w.txt")
    with pytest.raises(FileNotFoundError, match=r"missing\.npy"):
        load_token_ids(tmp_path / "missing.npy")


def test_a_crafted_trainer_state_is_refused_not_run(data, tmp_path, monkeypatch):
    target, corpus, _ = data
    cfg = TrainConfig(steps=4, **CFG)
    train_head(target, corpus, tmp_path / "run", cfg, progress=False, log=None, stop_after=2)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "marker"
    state = tmp_path / "run" / "trainer_state.pt"
    for write in (lambda: torch.save({"optimizer": _Payload(marker), "rng": 0, "step": 2,
                                      "history": []}, state),
                  lambda: state.write_bytes(pickle.dumps(_Payload(marker), protocol=2))):
        write()
        with pytest.raises(ValueError, match="not a trainer state written by train_head"):
            train_head(target, corpus, tmp_path / "run", cfg, progress=False, log=None)
        assert not marker.exists()


def test_corpus_ids_outside_the_vocabulary_are_a_value_error(data):
    target, corpus, _ = data
    bad = corpus.clone()
    bad[7] = 96  # the tiny target has 96 tokens
    with pytest.raises(ValueError, match=r"outside the target's vocabulary \[0, 96\)"):
        train_head(target, bad, None, TrainConfig(steps=1, **CFG), progress=False, log=None)


def test_draft_row_distillation_target_is_the_renormalised_restriction(data):
    from spec_adapters.eagle.features import draft_probs, target_features

    target, corpus, _ = data
    d2t = torch.tensor([0, 3, 4, 9, 17, 40, 41, 95])
    ids = corpus[:40].view(2, 20)
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
    full = torch.softmax(out.logits.float(), -1)
    feats, last = target_features(target, ids, (1, 2))
    torch.testing.assert_close(feats, torch.cat([out.hidden_states[1], out.hidden_states[2]], -1))
    restricted = full[..., d2t]
    torch.testing.assert_close(draft_probs(target, last, d2t),
                               restricted / restricted.sum(-1, keepdim=True))
    torch.testing.assert_close(draft_probs(target, last, d2t, full_vocab=True), restricted)
    # the full-vocabulary variant trains as well (and differently)
    a, _ = train_head(target, corpus, None, TrainConfig(steps=3, **CFG), progress=False,
                      log=None)
    b, _ = train_head(target, corpus, None,
                      TrainConfig(steps=3, full_vocab_distill=True, **CFG), progress=False,
                      log=None)
    assert not torch.equal(a.lm_head.weight, b.lm_head.weight)
