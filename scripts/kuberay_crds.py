"""KubeRay's CRDs, pinned and checksummed, for the deployment tests (tests/unit/test_deploy_manifests.py).

    python scripts/kuberay_crds.py        # `make crds`

With RLSVC_KUBERAY_CRDS set to a folder, checks the two files there (no download). Otherwise
downloads KubeRay v1.7.0's released CRDs into .cache/kuberay-crds/v1.7.0/ (git-ignored), each file
written to a temp file, checked against its sha256 and renamed into place; files already there
with the right hash are kept. Any failure is one line on stderr and exit status 2.
Standard library only: it runs before (and without) the project's dependencies.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.request
from pathlib import Path

VERSION = "v1.7.0"
ENV_VAR = "RLSVC_KUBERAY_CRDS"
BASE_URL = f"https://raw.githubusercontent.com/ray-project/kuberay/{VERSION}/ray-operator/config/crd/bases"
CRDS = {
    "ray.io_rayclusters.yaml": "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1",
    "ray.io_rayjobs.yaml": "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
}
REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "kuberay-crds" / VERSION
TIMEOUT_S = 60


class CrdError(Exception):
    """What is wrong, in one line."""


def crds_dir() -> Path:
    """Where the CRDs are: the folder RLSVC_KUBERAY_CRDS names, else the download cache."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser().resolve() if env else CACHE


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(folder: Path) -> None:
    """Both CRDs are in `folder` with their pinned sha256, or CrdError."""
    for name, want in CRDS.items():
        path = folder / name
        if not path.is_file():
            raise CrdError(f"{path} is missing")
        got = sha256(path)
        if got != want:
            raise CrdError(f"{path} has sha256 {got}, expected {want} (KubeRay {VERSION})")


def download(folder: Path, base_url: str = BASE_URL) -> None:
    """Fetch each CRD not already in `folder` with the right hash; nothing half-written is left."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, want in CRDS.items():
        dest = folder / name
        if dest.is_file() and sha256(dest) == want:
            continue
        url = f"{base_url}/{name}"
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                try:
                    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
                        for block in iter(lambda: resp.read(1 << 20), b""):
                            h.update(block)
                            out.write(block)
                except OSError as e:  # URLError, HTTPError, timeouts are all OSErrors
                    reason = getattr(e, "reason", None) or e
                    raise CrdError(f"cannot download {url}: {reason}") from e
            if h.hexdigest() != want:
                raise CrdError(f"{url} has sha256 {h.hexdigest()}, expected {want}")
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)


def ensure() -> Path:
    """The folder holding the verified CRDs: checked where RLSVC_KUBERAY_CRDS points, else downloaded."""
    folder = crds_dir()
    if os.environ.get(ENV_VAR):
        if not folder.is_dir():
            raise CrdError(f"{ENV_VAR}={os.environ[ENV_VAR]} is not a folder")
    else:
        download(folder)
    verify(folder)
    return folder


def main() -> int:
    try:
        folder = ensure()
    except (CrdError, OSError) as e:  # OSError: e.g. the cache folder cannot be written
        print("kuberay_crds: " + " ".join(str(e).split()), file=sys.stderr)  # one line
        return 2
    print(f"KubeRay {VERSION} CRDs: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
