"""The Miniconda test double takes conda create's channel options as python_env passes them
(--override-channels --channel SITE) and reports the channels it used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ascend_sim.miniconda import build_installer


def _conda(tmp_path: Path) -> Path:
    name, _ = build_installer(tmp_path / "dl", os.uname().machine)
    prefix = tmp_path / "miniconda3"
    subprocess.run(["bash", str(tmp_path / "dl" / name), "-b", "-p", str(prefix)], check=True,
                   capture_output=True, env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                             + os.environ["PATH"]})
    return prefix / "bin" / "conda"


def test_create_takes_the_site_channel_alone(tmp_path: Path) -> None:
    conda = _conda(tmp_path)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    env = tmp_path / "env"
    proc = subprocess.run([str(conda), "create", "--yes", "--prefix", str(env),
                           "--override-channels", "--channel", "file:///srv/conda-mirror",
                           f"python={python}"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Channels:\n - file:///srv/conda-mirror\nPlatform" in proc.stdout, proc.stdout
    history = (env / "conda-meta" / "history").read_text()
    assert "--channel file:///srv/conda-mirror" in history
    bare = subprocess.run([str(conda), "create", "--yes", "--prefix", str(tmp_path / "e2"),
                           "--override-channels", f"python={python}"],
                          capture_output=True, text=True, check=False)
    assert bare.returncode == 1 and "needs at least one --channel" in bare.stderr
