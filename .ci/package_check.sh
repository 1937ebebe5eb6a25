#!/usr/bin/env bash
# The product as a user gets it: an sdist and a wheel built with `python -m build` (the wheel from the
# sdist), installed into a clean venv outside the checkout with the extras the README's install names,
# then, from a folder outside the checkout: --version, `validate` of every shipped scenario, the demo,
# and the demo run's Parquet export and page. Why: tests run from the checkout, where a data file the
# wheel leaves out is still on disk; only an installed wheel shows it missing.
#
#   bash .ci/package_check.sh            (MOE_HARNESS_PACKAGE_KEEP=1 keeps its temporary folder)
#
# Packages come from the index pip is configured for (PyPI), through pip's cache; torch is pinned to
# its CPU build by .ci/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout="$PWD"
extras="embedded,ray,metrics,report"  # the README's install line
say() { printf 'package_check: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/moe-harness-package.XXXXXX")"
[ "${MOE_HARNESS_PACKAGE_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
started=$SECONDS

# 1. Build from a copy of the build's inputs: an in-place build reads a stale *.egg-info/SOURCES.txt
#    (setuptools packs what it lists) and writes build/ into the checkout.
mkdir "$work/source"
tar -C "$checkout" --exclude=__pycache__ -cf - pyproject.toml README.md analysis harness scenarios \
  | tar -C "$work/source" -xf -
python3 -m venv "$work/build-venv"
"$work/build-venv/bin/python" -m pip install -q "build>=1" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; fail "pip install build"; }
"$work/build-venv/bin/python" -m build --outdir "$work/dist" "$work/source" >>"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; fail "python -m build"; }
wheel="$(ls "$work"/dist/*.whl)"
sdist="$(ls "$work"/dist/*.tar.gz)"
say "built $(basename "$sdist") and $(basename "$wheel") in $((SECONDS - started)) s"

# 2. A clean venv (no system site-packages), the wheel with the README's extras.
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q -c "$checkout/.ci/constraints.txt" "$wheel[$extras]" \
  >"$work/install.log" 2>&1 \
  || { tail -30 "$work/install.log" >&2; fail "pip install the wheel with [$extras]"; }
say "installed with [$extras] at $((SECONDS - started)) s"

# 3. Every check from outside the checkout, with nothing of the checkout on the path.
mkdir "$work/user"
cd "$work/user"
unset PYTHONPATH VIRTUAL_ENV RAY_ADDRESS
bin="$work/venv/bin"
site="$("$bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

version="$("$bin/python" -c 'import tomllib, sys; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$checkout/pyproject.toml")"
said="$("$bin/moe-harness" --version)"
[ "$said" = "moe-harness $version" ] || fail "--version printed '$said', expected 'moe-harness $version'"

for shipped in "$checkout"/scenarios/*.yaml; do
  name="$(basename "$shipped" .yaml)"
  verdict="$("$bin/moe-harness" validate "$name")" || fail "validate $name"
  case "$verdict" in
    "ok: $site/harness/scenarios/$name.yaml "*) ;;
    *) fail "validate $name did not read the installed scenario: $verdict" ;;
  esac
done
say "--version and validate of $(ls "$checkout"/scenarios/*.yaml | wc -l) shipped scenarios ok"

"$bin/moe-harness" run --scenario demo --runs-dir "$work/user/runs" >"$work/demo.log" 2>&1 \
  || { tail -30 "$work/demo.log" >&2; fail "the demo (moe-harness run --scenario demo)"; }
run_dir="$(ls -d "$work"/user/runs/demo-*)"
"$bin/python" -c 'import json, sys; m = json.load(open(sys.argv[1])); sys.exit(m["status"] != "ok")' \
  "$run_dir/manifest.json" || fail "the demo's manifest status is not ok: $run_dir/manifest.json"
"$bin/moe-harness" export "$run_dir" --format parquet >/dev/null || fail "export --format parquet"
ls "$run_dir"/exports/*.parquet >/dev/null || fail "export --format parquet wrote no .parquet file"
"$bin/moe-harness" view "$run_dir" --out "$work/user/page" >/dev/null || fail "view"
ls "$work"/user/page/*.html >/dev/null || fail "view wrote no page"
say "demo (status ok), export --format parquet and view ok; all in $((SECONDS - started)) s"
