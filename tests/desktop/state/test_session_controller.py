"""desktop.state.session_controller: the shown run saved to a session file on the model thread,
read back and shown as a recorded run; the autosave lives in the cache folder."""

from __future__ import annotations

from tests.desktop.state.conftest import run


def test_the_autosave_lives_in_the_cache_folder():
    from llm_lens.core.loading import cache_root
    from llm_lens.desktop.state.session_controller import SessionController

    assert SessionController.autosave_path() == str(cache_root() / "autosave.llmlens")


def test_a_saved_run_reads_back_and_reopens_as_recorded(qtbot, tiny_ctl, tmp_path):
    from llm_lens.core.sessions.read import load_session

    run(qtbot, tiny_ctl, tokens=3)
    ids = [s.token.id for s in tiny_ctl.steps]
    path = tmp_path / "tiny.llmlens"
    assert tiny_ctl.dirty
    with qtbot.waitSignal(tiny_ctl.sig_saved, timeout=60_000) as saved:
        tiny_ctl.sessions.request_save(str(path), with_views=False)
    assert saved.args == [str(path), path.stat().st_size]
    assert not tiny_ctl.dirty
    session = load_session(path)
    assert [r.prompt.text for r in session.runs] == ["the cat sat on the mat"]
    assert [s.token.id for s in session.runs[0].steps] == ids

    run(qtbot, tiny_ctl, text="a dog", tokens=2)
    with qtbot.waitSignal(tiny_ctl.sig_session_changed, timeout=60_000):
        tiny_ctl.sessions.request_open(str(path))
    assert tiny_ctl.recorded is not None and tiny_ctl.prompt.text == "the cat sat on the mat"
    assert [s.token.id for s in tiny_ctl.steps] == ids
