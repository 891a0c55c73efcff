#!/usr/bin/env bash
# Build a wheel as a user's pip would (isolated build), install it -- not editable -- in a fresh virtual
# environment, and run the installed rillet-server and rillet CLI (scripts/smoke_wheel.py), which must run the
# compiled lane (the wheel carries the extensions: checked before it is installed). Package data
# that the wheel lacks (rillet/jetstream/errors.json once did) fails here. Called by .ci/run; runs alone too:
#     bash scripts/smoke_wheel.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH PYTHONHOME PIP_USER RILLET_PURE || true
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rillet-wheel-smoke.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

# a clean copy of the sources: a stale build/ directory in the work tree cannot leak into the wheel
mkdir -p "$WORK/src"
cp "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/MANIFEST.in" "$ROOT/README.md" "$WORK/src/"
(cd "$ROOT" && tar --exclude=__pycache__ --exclude='*.py[co]' --exclude='*.so' -cf - rillet) | tar -xf - -C "$WORK/src"

echo "wheel smoke: building the wheel"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
wheels=("$WORK"/dist/rillet-*.whl)
[ -f "${wheels[0]}" ] || { echo "wheel smoke: FAILED: no wheel built" >&2; exit 1; }
# the compiled lane (setup.py): built here, where a C compiler is present
"$PY" - "${wheels[0]}" <<'PYEOF' || exit 1
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [m for m in ("_cparser", "_cserver", "_cdeliver", "_cstore", "_cjs", "_ccluster") if not any(re.fullmatch(rf"rillet/_speedups/{m}\.[^/]*\.so", n) for n in names)]
if missing:
    sys.exit(f"wheel smoke: FAILED: the wheel lacks the compiled lane's extensions {missing}")
print("wheel smoke: the wheel carries the compiled lane")
PYEOF

echo "wheel smoke: installing $(basename "${wheels[0]}") in a new virtual environment"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "${wheels[0]}"
# the pytest plugin (rillet.testing.pytest_plugin) is registered by the installed package's entry point
"$WORK/venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.value == 'rillet.testing.pytest_plugin' for e in m.entry_points(group='pytest11')) else 'wheel smoke: FAILED: the wheel registers no pytest11 entry point for rillet.testing.pytest_plugin')"

# from the scratch directory, so that nothing can import the source tree
cd "$WORK"
"$WORK/venv/bin/python" "$ROOT/scripts/smoke_wheel.py" --bin "$WORK/venv/bin" --work "$WORK"
echo "wheel smoke: done in $((SECONDS - start))s"
