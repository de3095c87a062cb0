#!/usr/bin/env bash
# Show that the Chakra schema bindings and reader/writer work on every protobuf major the
# project allows (pyproject: protobuf>=5.26,<8), with both protobuf backends (upb and pure
# Python). Not part of CI: it installs several venvs from the package index and takes minutes.
#
# Usage: scripts/protobuf_matrix.sh [PROTOBUF_VERSION ...]
#        (default: the 5.26 floor and the newest 5.x, 6.x and 7.x releases tried so far)
#
# For each version: a fresh venv under /tmp, a non-editable install of a wheel of this project
# with that protobuf pinned (so the tests import the installed tacos.proto, not the source tree),
# plus pytest; on 5.x also grpcio-tools 1.64.3 so the regeneration checks run instead of
# skipping. Then tests/test_chakra_io.py and tests/test_chakra_schema.py run from outside the
# repository. Prints one summary line per version and backend; exits 1 if any run failed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  versions=(5.26.1 5.29.6 6.33.6 7.36.2)
fi
work=$(mktemp -d /tmp/tacos-protobuf-matrix.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Build the wheel from a copy: building in the repository would leave build/ and *.egg-info.
mkdir "$work/src"
tar -C "$repo" --exclude=.git --exclude=build --exclude='*.egg-info' -cf - . | tar -C "$work/src" -xf -
python3 -m pip wheel --quiet --no-deps --wheel-dir "$work/wheel" "$work/src"
wheel=$(ls "$work"/wheel/*.whl)

summary=()
failed=0
for version in "${versions[@]}"; do
  venv="$work/venv-$version"
  python3 -m venv "$venv"
  extra=()
  if [ "${version%%.*}" = 5 ]; then
    extra=(grpcio-tools==1.64.3)
  fi
  "$venv/bin/pip" install --quiet "$wheel" "protobuf==$version" pytest "${extra[@]}"
  for backend in upb python; do
    echo "=== protobuf $version, $backend backend"
    # Run from $work so neither cwd nor the rootdir puts the source tree's tacos/ on sys.path.
    log="$work/pytest-$version-$backend.log"
    set +e
    (cd "$work" && PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=$backend "$venv/bin/python" -c '
import sys, google.protobuf, tacos.proto.et_def_pb2 as m
from google.protobuf.internal import api_implementation
assert m.__file__.startswith(sys.prefix), f"imported {m.__file__}, not the installed copy"
print("protobuf", google.protobuf.__version__, api_implementation.Type(), m.__file__)
' && "$venv/bin/pytest" -p no:cacheprovider -rs \
        "$repo/tests/test_chakra_io.py" "$repo/tests/test_chakra_schema.py") 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    summary+=("protobuf $version ($backend): $(tail -n 1 "$log")")
    if [ "$status" -ne 0 ]; then
      failed=1
    fi
  done
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
