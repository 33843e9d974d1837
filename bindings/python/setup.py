"""Builds libnenyax with cargo and bundles it (with include/nenyax.h) into the package.

The wheel is platform-specific (it carries a native library) but not tied to one CPython ABI:
the binding loads the library with cffi's ABI mode, so there is no compiled extension and no
libpython in the core library.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LIB_NAME = "libnenyax.dylib" if sys.platform == "darwin" else "libnenyax.so"


def native_library() -> Path:
    """The library to bundle: NENYAX_LIBRARY if set (a prebuilt one), else a cargo release build."""
    prebuilt = os.environ.get("NENYAX_LIBRARY")
    if prebuilt:
        return Path(prebuilt)
    if not (REPO / "ffi" / "Cargo.toml").exists():
        sys.exit(
            "nenyax-native: build from the Nenyax repository (pip install ./bindings/python), "
            "or set NENYAX_LIBRARY to a built libnenyax"
        )
    cmd = ["cargo", "build", "--release", "-p", "nenyax-ffi"]
    features = os.environ.get("NENYAX_FEATURES")
    if features:
        cmd += ["--no-default-features", "--features", features]
    print("nenyax-native: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / LIB_NAME


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        out = Path(self.build_lib) / "nenyax_native"
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(native_library(), out / LIB_NAME)
        # The release profile keeps debug info for profiling; a wheel does not need it (19 MB -> ~6).
        if shutil.which("strip") and sys.platform != "darwin":
            subprocess.run(["strip", "--strip-debug", str(out / LIB_NAME)], check=False)
        shutil.copy2(REPO / "include" / "nenyax.h", out / "nenyax.h")


class NativeDistribution(Distribution):
    # A wheel with a native library must carry a platform tag.
    def has_ext_modules(self) -> bool:
        return True


try:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

    class bdist_wheel(_bdist_wheel):
        def finalize_options(self) -> None:
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            # py3-none-<platform>: any CPython 3 (cffi ABI mode), this platform.
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass = {"build_py": BuildWithLibrary, "bdist_wheel": bdist_wheel}
except ImportError:  # pragma: no cover - wheel is a build requirement
    cmdclass = {"build_py": BuildWithLibrary}

setup(cmdclass=cmdclass, distclass=NativeDistribution)
