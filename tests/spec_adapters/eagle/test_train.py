"""Head training: learns, is deterministic, resumes bit-identically, reports held-out gamma."""

from __future__ import annotations

import pytest
import torch

from spec_adapters.eagle import EagleHead
from spec_adapters.eagle.train import TrainConfig, evaluate_head, train_head
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


def test_command_line_trains_and_resumes(data, tmp_path, capsys):
    from spec_adapters.eagle.train import main

    from ..bench_fixtures import make_tokenizer

    target, corpus, held = data
    target.save_pretrained(tmp_path / "target")
    make_tokenizer().save_pretrained(tmp_path / "target")  # a model folder, as load_target reads
    torch.save(corpus, tmp_path / "corpus.pt")
    (tmp_path / "held.txt").write_text(" ".join(map(str, held.tolist())))
    argv = ["--corpus", str(tmp_path / "corpus.pt"), "--heldout", str(tmp_path / "held.txt"),
            "--out", str(tmp_path / "head"), "--target", str(tmp_path / "target"),
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


def test_draft_row_distillation_target_is_the_renormalised_restriction(data):
    from spec_adapters.eagle.train import _target_pass, _target_pass_draft_rows

    target, corpus, _ = data
    d2t = torch.tensor([0, 3, 4, 9, 17, 40, 41, 95])
    ids = corpus[:40].view(2, 20)
    f1, l1, _, full = _target_pass(target, ids, (1, 2), d2t)
    f2, l2, p2, _ = _target_pass_draft_rows(target, ids, (1, 2), d2t)
    restricted = full[..., d2t]
    torch.testing.assert_close(p2, restricted / restricted.sum(-1, keepdim=True))
    torch.testing.assert_close(f1, f2)
    torch.testing.assert_close(l1, l2)
    # the full-vocabulary variant trains as well (and differently)
    a, _ = train_head(target, corpus, None, TrainConfig(steps=3, **CFG), progress=False,
                      log=None)
    b, _ = train_head(target, corpus, None,
                      TrainConfig(steps=3, full_vocab_distill=True, **CFG), progress=False,
                      log=None)
    assert not torch.equal(a.lm_head.weight, b.lm_head.weight)
