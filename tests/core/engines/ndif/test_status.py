"""The job's status updates reach a callback; the key comes from the environment or keyring."""

from __future__ import annotations

import sys
import types

import pytest

from llm_lens.core.engines.ndif.status import (
    KEY_ENV,
    NO_KEY,
    JobStatus,
    NdifError,
    api_key,
    remote_backend,
    remote_failure,
)
from llm_lens.core.errors import LensError


def test_key_from_the_environment(monkeypatch):
    monkeypatch.setenv(KEY_ENV, " secret-1 ")
    assert api_key() == "secret-1"


def test_key_from_the_keyring(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    ring = types.SimpleNamespace(get_password=lambda service, name: f"{service}/{name}")
    monkeypatch.setitem(sys.modules, "keyring", ring)
    assert api_key() == "ndif/api_key"


def test_no_key_is_one_line(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "keyring", None)  # not installed: the import fails
    with pytest.raises(LensError) as err:
        api_key()
    assert str(err.value) == NO_KEY and "\n" not in NO_KEY


class _Model:
    def to_model_key(self) -> str:
        return "nnsight.modeling.transformers.TransformersModel:{}"


def test_remote_backend_reports_each_status_and_holds_the_key_in_memory_only():
    from nnsight.intervention.backends.remote import RemoteError
    from nnsight.schema.response import ResponseModel, Status

    seen: list[JobStatus] = []
    backend = remote_backend(_Model(), "k-123", seen.append, "https://ndif.invalid")
    assert backend.api_key == "k-123"
    assert not backend.note(ResponseModel(id="j1", status=Status.QUEUED, description="2 ahead"))
    assert not backend.note(ResponseModel(id="j1", status=Status.RUNNING))
    with pytest.raises(RemoteError):
        backend.note(ResponseModel(id="j1", status=Status.ERROR, description="out of memory"))
    assert [(s.state, s.description, s.job_id) for s in seen] == [
        ("QUEUED", "2 ahead", "j1"),
        ("RUNNING", "", "j1"),
        ("ERROR", "out of memory", "j1"),
    ]
    assert seen[0].waiting and not seen[1].waiting
    assert all("k-123" not in repr(s) for s in seen)


def test_remote_failures_are_told_from_bugs():
    from nnsight.intervention.backends.remote import RemoteError

    assert remote_failure(RemoteError("model not served"))
    assert remote_failure(ConnectionRefusedError())
    assert not remote_failure(ValueError("a bug"))
    assert issubclass(NdifError, LensError)
