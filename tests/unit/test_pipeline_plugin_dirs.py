"""The pipeline's executors find the plugins the driver finds: ``plugins`` missing from the working
directory is the package's shipped folder (etc/examples/pipeline.toml's header-map), made absolute."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.locations import shipped_folder
from gateway.pipeline.settings import parse_pipeline_settings, pipeline_spec


def test_the_spec_names_the_shipped_plugins_when_the_working_directory_has_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse_config({"gateway": {"id": "gw"}, "pipeline": {"ingest_topics": ["in"], "bootstrap": "h:1"}},
                          str(tmp_path / "gw.toml"))
    spec = pipeline_spec(config, parse_pipeline_settings(config))
    assert spec.transform["plugin_dirs"] == [str(shipped_folder("plugins"))]
    (tmp_path / "plugins").mkdir()  # a folder of its own wins
    spec = pipeline_spec(config, parse_pipeline_settings(config))
    assert spec.transform["plugin_dirs"] == [str(tmp_path / "plugins")]
