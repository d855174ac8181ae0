"""Java kafka-clients for tests: where ``../shared/compat/setup.sh`` put the jars, and a test's
Java source compiled against them (skipped, with the reason, where there is no JDK or no jars)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

COMPAT_HOME = Path(os.environ.get("STROM_COMPAT_HOME", Path.home() / ".cache" / "strom-compat"))
JAVA_LIBS = COMPAT_HOME / "java" / "libs"

__all__ = ["COMPAT_HOME", "JAVA_LIBS", "compile_java", "java_unavailable"]


def java_unavailable() -> str | None:
    """Why Java clients cannot run here (no JDK, no kafka-clients jar), or None."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "no JDK (javac/java) on PATH"
    if not list(JAVA_LIBS.glob("kafka-clients-*.jar")):
        return f"no Java kafka-clients jar in {JAVA_LIBS} (run ../shared/compat/setup.sh)"
    return None


def compile_java(source: Path | str, out: Path, name: str | None = None) -> str:
    """Compile ``source`` (a ``.java`` file, or the text of one named ``name``, e.g.
    ``"GroupRestart"``) against kafka-clients into ``out``; the class path to run it with.
    For tests: skips the calling test when Java is unavailable; a compile error fails it with
    javac's message."""
    import pytest

    reason = java_unavailable()
    if reason is not None:
        pytest.skip(reason)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(source, str):
        if name is None:
            raise ValueError("Java source text needs the name of its public class")
        path = out / f"{name}.java"
        path.write_text(source)
    else:
        path = source
    r = subprocess.run(["javac", "-cp", f"{JAVA_LIBS}/*", "-d", str(out), str(path)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"javac {path.name} failed:\n{r.stderr[-3000:]}")
    return f"{out}:{JAVA_LIBS}/*"
