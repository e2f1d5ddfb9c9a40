"""The append-only record store of the resumable benchmarks: ``records.jsonl`` of finished
runs (a line cut by an interruption is redone) and the guard against resuming a folder of
another run's settings."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["Records", "SettingsMismatchError", "check_settings"]


class Records:
    """Append-only JSONL of finished runs, keyed by (section, query, temperature, method)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.rows: dict[tuple, dict] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a line cut by an interruption: that run is simply redone
                self.rows[self.key(r)] = r

    @staticmethod
    def key(r: dict) -> tuple:
        return (r["section"], r["qid"], float(r["temperature"]), r["method"], r.get("n", 0))

    def has(self, *key) -> bool:
        return tuple(key) in self.rows

    def add(self, r: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(r) + "\n")
            fh.flush()
        self.rows[self.key(r)] = r

    def select(self, **match) -> list[dict]:
        return [r for r in self.rows.values() if all(r.get(k) == v for k, v in match.items())]


class SettingsMismatchError(ValueError):
    """A results folder holds records of a run with other settings (the user picks another
    ``--out``); a benchmark's other errors are bugs and keep their traceback."""


def check_settings(out: Path, settings: dict) -> None:
    """Refuse ``out`` (:class:`SettingsMismatchError`) when it holds records of a run with other
    ``settings``; then write ``settings.json`` (a resumable benchmark's guard), creating
    ``out`` if needed."""
    sfile = out / "settings.json"
    if (sfile.is_file() and (out / "records.jsonl").is_file()
            and json.loads(sfile.read_text()) != json.loads(json.dumps(settings))):
        raise SettingsMismatchError(f"{out} holds results of a run with other settings; pass "
                               "another --out folder (or delete that one) to start afresh")
    out.mkdir(parents=True, exist_ok=True)
    sfile.write_text(json.dumps(settings, indent=1))
