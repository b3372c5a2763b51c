#!/usr/bin/env bash
# The package as a team gets it: build the sdist and the wheel (the wheel from the sdist, so the
# sdist must hold everything), check both (twine check --strict), install the wheel into a clean
# venv, and run the tool from an empty folder: --version, init ., validate, lock, render, and the
# checks CI runs on the result (render --check, lock --check); `releases tables --write` must refuse
# to write the installed package, `explain --json` of an unknown message print []. Nothing may be
# left outside that folder: HOME and TMPDIR are fresh empty folders, and after the run they, the
# venv and everything else beside the project must hold no file the run wrote.
#
#   scripts/wheel-check.sh [DIST]   DIST: where to leave the sdist and wheel (default: a temporary folder)
#
# PYTHON is the interpreter that builds, checks and makes the venv (default: python3); it needs uv
# and twine (the test extra). tests/test_package.py runs this script, so `make test` and CI do; the
# release workflow runs it before anything is published. lock resolves against the package index.
set -euo pipefail

PYTHON=${PYTHON:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ascend-build-wheel-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
dist=${1:-$work/dist}
mkdir -p "$dist"
say() { printf 'wheel-check: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

say "building the sdist and the wheel into $dist"
rm -f "$dist"/ascend_build-*
"$PYTHON" -m uv build --quiet --out-dir "$dist" "$repo"
sdist=$(ls "$dist"/ascend_build-*.tar.gz)
wheel=$(ls "$dist"/ascend_build-*.whl)
"$PYTHON" -m twine check --strict "$sdist" "$wheel"

say "the wheel holds the package data, what init writes, and the license"
"$PYTHON" - "$wheel" "$repo" <<'EOF'
import subprocess, sys, zipfile
wheel, repo = sys.argv[1], sys.argv[2]
names = set(zipfile.ZipFile(wheel).namelist())
tracked = subprocess.run(["git", "-C", repo, "ls-files", "builder/data", "builder/templates"],
                         capture_output=True, text=True, check=True).stdout.split()
missing = [n for n in tracked if n not in names]
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
    missing.append("*.dist-info/licenses/LICENSE")
if missing or not tracked:
    sys.exit(f"the wheel lacks: {', '.join(missing) or 'every data file (git ls-files found none)'}")
print(f"  {len(tracked)} data and template files, and the LICENSE")
EOF

say "installing the wheel into a clean venv"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$wheel"
tool=$work/venv/bin/ascend-build

# From here on, every file the run writes must be under $work/project.
mkdir -p "$work/project" "$work/home" "$work/tmp"
touch "$work/started"
sleep 1  # a file written in the same second as the mark would not be newer than it
run() {  # the tool in the project folder, with a fresh HOME and TMPDIR
  say "ascend-build $*"
  (cd "$work/project" && env -u XDG_CACHE_HOME -u XDG_CONFIG_HOME -u XDG_DATA_HOME \
     HOME="$work/home" TMPDIR="$work/tmp" "$tool" "$@")
}

version=$(run --version)
expected=$("$work/venv/bin/python" -c 'from importlib.metadata import version; print(version("ascend-build"))')
[ "$version" = "ascend-build $expected" ] || fail "--version printed '$version', the wheel is $expected"
run init .
run validate
run lock
run render
run render --check
run lock --check
# the installed package's builder/data is never written: generating it is a checkout's job
if refused=$(run releases tables --write --documents . 2>&1); then fail "releases tables --write ran from the wheel"; fi
case "$refused" in
  *"an installed package's files are not edited"*) ;;
  *) fail "releases tables --write was not refused as writing the installed package: $refused" ;;
esac
explained=$(run explain --json "no Ascend error in this line" || true)
"$PYTHON" -c 'import json, sys; assert json.loads(sys.argv[1]) == [], sys.argv[1]' "$explained" \
  || fail "explain --json of an unknown message printed no JSON list: $explained"

for cell in "$work"/project/dockerfiles/*/; do
  [ -f "$cell/Dockerfile" ] && [ -f "$cell/requirements.lock" ] || fail "$cell lacks its Dockerfile or lock"
done
cells=$(ls -d "$work"/project/dockerfiles/*/ | wc -l)
[ "$cells" -ge 1 ] || fail "render wrote no cell"

written_outside() {
  find "$work" -newer "$work/started" ! -path "$work/project" ! -path "$work/project/*" \
    ! -path "$work" ! -path "$work/home" ! -path "$work/tmp" -print
}
outside=$(written_outside)
[ -z "$outside" ] || fail "written outside the project folder: $outside"
touch "$work/venv/probe"  # the check itself, shown to see a file written beside the project
written_outside | grep -qx "$work/venv/probe" || fail "the check for files written outside misses $work/venv/probe"
say "ok: $version; init, validate, lock and render from an empty folder wrote $cells cells and nothing outside it"
