"""llama.cpp's own log (descriptor 2) is kept off the terminal and handed to an error."""

from __future__ import annotations

import os

from spec_adapters.llamacpp.native_log import captured


def test_native_stderr_is_captured_and_its_tail_ends_an_error_message(capfd):
    capfd.readouterr()
    with captured() as log:
        os.write(2, b"load: one\nrepack: tensor 1\nrepack: tensor 2\n")
    assert capfd.readouterr().err == ""  # nothing reached the terminal
    assert log.detail(2) == ":\nrepack: tensor 1\nrepack: tensor 2"
    with captured() as quiet:
        pass
    assert quiet.detail() == ""  # nothing written: nothing added to the message
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"  # descriptor 2 is back
