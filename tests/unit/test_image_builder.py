"""`make image`'s builder (tools/image): the tag it builds is the chart's, its cache key is honest.

The image test (tests/integration/test_image.py) runs what the builder makes; these check,
without building, that the tag is the project version and the chart's appVersion (the chart
deploys `localhost/gpucellpool/operator:<appVersion>` by default), that the build context
holds exactly what the Containerfile copies, and that the cache key moves with every input
and only with inputs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "image"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(TOOLS))
    try:
        spec = importlib.util.spec_from_file_location(f"image_{name}", TOOLS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


inputs = _load("inputs")
build = _load("build")


def test_the_tag_is_the_project_version_and_the_charts_app_version() -> None:
    chart = yaml.safe_load((ROOT / "charts/gpucellpool/Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert inputs.project_version() == project["version"] == str(chart["appVersion"])
    values = yaml.safe_load((ROOT / "charts/gpucellpool/values.yaml").read_text())
    assert values["image"]["repository"] == build.IMAGE_NAME


def test_the_context_is_what_the_containerfile_copies() -> None:
    text = (ROOT / "Containerfile").read_text()
    copied = set()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.MULTILINE):
        copied |= {Path(p).name for p in line.split()[:-1]}
    staged = set(inputs.PACKAGES) | set(inputs.CONTEXT_FILES)
    # The Containerfile and .containerignore are staged (they shape the build) but not copied.
    assert copied == staged - {"Containerfile", ".containerignore"}
    ignore = (ROOT / ".containerignore").read_text().splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert copied == allowed
    # Docker reads .dockerignore, Podman and buildah .containerignore: one list, two names.
    assert (ROOT / ".dockerignore").read_text() == (ROOT / ".containerignore").read_text()


def _tree(root: Path, body: str) -> None:
    for name in inputs.CONTEXT_FILES:
        (root / name).write_text(f"{name}\n")
    (root / "pyproject.toml").write_text('[project]\nversion = "9.9.9"\n')
    for package in inputs.PACKAGES:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text(body)
    cache = root / "gpucellpool" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")


def _key(root: Path, tmp: Path) -> str:
    context = tmp / f"ctx-{len(list(tmp.iterdir()))}"
    files = inputs.stage(context, root)
    assert not any("__pycache__" in str(f) for f in files)
    assert inputs.project_version(context) == "9.9.9"
    return str(inputs.digest_of(context, files, {"builder-base": "k"}))


def test_the_cache_key_moves_with_each_input_and_only_with_inputs(tmp_path: Path) -> None:
    src, scratch = tmp_path / "src", tmp_path / "scratch"
    src.mkdir()
    scratch.mkdir()
    _tree(src, "x = 1\n")
    first = _key(src, scratch)
    (src / "gpucellpool" / "__pycache__" / "y.pyc").write_bytes(b"1")  # not an input
    (src / "tests.txt").write_text("not an input")
    assert _key(src, scratch) == first
    (src / "webhook" / "__init__.py").write_text("x = 2\n")
    second = _key(src, scratch)
    assert second != first
    (src / "webhook" / "__init__.py").write_text("x = 1\n")
    assert _key(src, scratch) == first
    (src / "Containerfile").write_text("FROM other\n")
    assert _key(src, scratch) not in (first, second)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"GPUCELLPOOL_IMAGE_CACHE": "/c/img"}, "/c/img"),
        ({"GPUCELLPOOL_CACHE": "/c/k8s/bin"}, "/c/k8s/image"),
        ({}, "~/.cache/gpucellpool/image"),
    ],
)
def test_cache_directory(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("GPUCELLPOOL_IMAGE_CACHE", raising=False)
    monkeypatch.delenv("GPUCELLPOOL_CACHE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert build.cache_dir() == Path(expected).expanduser()
