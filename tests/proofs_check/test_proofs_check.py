"""`python -m proofs_check --quick` passes, fast, and fails when a formula is wrong."""

from __future__ import annotations

import json

import torch

import spec_adapters.core.sampling as sampling
from proofs_check import __main__ as cli
from proofs_check.check_acceptance import check_theorem1
from proofs_check.check_estimators import check_theorem3
from proofs_check.result import Settings

torch.set_num_threads(1)


def test_quick_run_passes_every_check(capsys):
    """Every quick check passes, with 600 sampler draws a case instead of 3000 (the chi-square
    still rejects a categorical draw not scaled by the weights' total at p ~ 1e-90)."""
    rows = cli.run(None, Settings(quick=True, draws_scale=0.2))
    failed = [r.check + ": " + r.measured for r in rows if not r.passed]
    assert not failed, failed
    assert {r.check.split()[0] for r in rows} == {"1", "2", "3", "4", "5", "6", "7", "8"}
    assert any(r.check == "3 sampler MC" for r in rows)
    code = cli.main(["--quick", "--json", "--only", "theorem2"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"] and report["quick"]
    assert [c["verdict"] for c in report["checks"]] == ["PASS", "PASS"]


def test_wrong_acceptance_ratio_fails_theorem1_and_theorem3(monkeypatch):
    def wrong_rule(p, q, draft, rand):  # min(1, q/p) instead of min(1, p/q)
        K, q = len(draft), q.dense()
        for k, x in enumerate(draft):
            px, qx = float(p[k, x]), float(q[k, x])
            if rand.bernoulli(min(1.0, qx / px) if px > 0 else 1.0, slot=k):
                continue
            return k, rand.categorical(sampling._residual(p[k], q[k]), slot=K)
        return K, rand.categorical(p[K], slot=K)

    monkeypatch.setattr(sampling, "_speculative_rule", wrong_rule)
    assert not any(r.passed for r in check_theorem1(Settings(quick=True)))
    assert not all(r.passed for r in check_theorem3(Settings(quick=True)))


def test_text_output_has_one_row_per_check_and_exit_code(capsys, monkeypatch):
    code = cli.main(["--quick", "--only", "theorem3"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("[PASS]") == 5 and "measured:" in out and "bound:" in out
    assert "5/5 checks passed" in out

    def boom(settings):
        raise RuntimeError("broken")

    monkeypatch.setitem(cli.CHECKS, "theorem3", boom)
    assert cli.main(["--quick", "--only", "theorem3"]) == 1
    assert "[FAIL]" in capsys.readouterr().out


def test_a_coupled_rule_that_draws_its_rejection_from_other_noise_fails_check_6(monkeypatch):
    """Resampling a rejected position from the residual with the round's last noise slot
    (speculative sampling's habit) keeps the law but not plain decoding's tokens."""
    from proofs_check.check_seeded import check_seeded

    def other_noise(p, draft, rand):
        for k, x in enumerate(draft):
            token = rand.categorical(p[k], slot=k)
            if token != x:
                residual = p[k].clone()
                residual[x] = 0
                return k, rand.categorical(residual, slot=k + 1)
        return len(draft), rand.categorical(p[len(draft)], slot=len(draft))

    monkeypatch.setattr(sampling, "_coupled_rule", other_noise)
    rows = {r.check: r for r in check_seeded(Settings(quick=True))}
    assert not rows["6 seeded identical"].passed


def test_a_rule_scored_at_the_wrong_length_fails_check7(monkeypatch):
    """A stop rule's loss gathered one token past its length: the rule's counterfactual no
    longer matches what it gets accepted when played."""
    import numpy as np

    from proofs_check.check_stoprules import check_stoprules
    from spec_adapters.selection.stop_rules import StopRules

    right = StopRules.losses

    def one_past(self, length_losses, lengths):
        return right(self, length_losses, np.minimum(lengths + 1, self.K))

    monkeypatch.setattr(StopRules, "losses", one_past)
    rows = {r.check: r.passed for r in check_stoprules(Settings(quick=True))}
    assert not rows["7 stop rules greedy"] and not rows["7 stop rules sampling"]
