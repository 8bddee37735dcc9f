"""desktop.widgets.resources: the shipped files are found in the installed package, or where
``LLM_LENS_RESOURCES`` points (a frozen bundle)."""

from __future__ import annotations

from llm_lens.desktop.widgets.resources import resource_dir


def test_the_resources_are_the_packages_unless_overridden(monkeypatch, tmp_path):
    monkeypatch.delenv("LLM_LENS_RESOURCES", raising=False)
    shipped = resource_dir()
    assert shipped.name == "resources" and shipped.is_dir() and any(shipped.iterdir())
    monkeypatch.setenv("LLM_LENS_RESOURCES", str(tmp_path))
    assert resource_dir() == tmp_path
