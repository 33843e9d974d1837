"""Every function the C header declares is used by the package (so none is left unwrapped)."""

import re
from pathlib import Path

import nenyax_native
from nenyax_native import _native

PACKAGE = Path(nenyax_native.__file__).parent

# The learner and training entry points belong to learners.py / train.py (another part of the
# binding). They are checked once those modules exist, so this test passes on every branch.
OWNED_BY_LEARNERS = {
    "nenyax_advantages",
    "nenyax_dapo_keep",
    "nenyax_reinforce_pp",
    "nenyax_dpo_loss",
    "nenyax_cuda_device",
    "nenyax_learner_json",
    "nenyax_pg_loss_batch",
    "nenyax_pg_loss",
    "nenyax_pg_loss_f32",
    "nenyax_pg_loss_cuda_f32",
    "nenyax_pg_loss_cuda_f64",
    "nenyax_pg_loss_cuda_host_f32",
}
OWNED_BY_TRAIN = {"nenyax_learner_new", "nenyax_learner_custom", "nenyax_learner_free", "nenyax_train", "nenyax_config_load"}


def declared():
    header = _native.HEADER_PATH.read_text(encoding="utf-8")
    return set(re.findall(r"\b(nenyax_[a-z0-9_]+)\(", header))


def test_every_declared_function_is_used():
    names = declared()
    assert len(names) >= 60 and "nenyax_env_load" in names
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.glob("*.py"))
    used = set(re.findall(r"\b(nenyax_[a-z0-9_]+)\b", source))
    expected = set(names)
    for module, owned in (("learners.py", OWNED_BY_LEARNERS), ("train.py", OWNED_BY_TRAIN)):
        assert owned <= names, f"{sorted(owned - names)} are not in the header any more"
        if not (PACKAGE / module).exists():
            expected -= owned
    missing = sorted(expected - used)
    assert not missing, f"declared in nenyax.h but not used by the package: {missing}"
