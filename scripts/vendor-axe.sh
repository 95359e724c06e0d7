#!/usr/bin/env bash
# Vendor axe-core (MPL-2.0) for the accessibility tests: fetch the npm registry's tarball with
# `npm pack`, check it against the registry's integrity hash, keep only axe.min.js and LICENSE
# under tests/vendor/axe-core/, and record their sha256 in SHA256SUMS. Only the tests inject it
# into pages (Playwright's add_script_tag), so it is not served from static/.
# Usage: bash scripts/vendor-axe.sh [version]   (default: the version recorded in VERSION)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/vendor/axe-core
version=${1:-$(cat "$dest/VERSION" 2>/dev/null || echo 4.14.1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "axe-core@$version" >/dev/null)
tarball="$work/axe-core-$version.tgz"
expected=$(npm view "axe-core@$version" dist.integrity 2>/dev/null)
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
[ "$expected" = "$actual" ] || { echo "integrity mismatch: registry $expected, tarball $actual" >&2; exit 1; }
tar -xzf "$tarball" -C "$work" package/axe.min.js package/LICENSE
mkdir -p "$dest"
cp "$work/package/axe.min.js" "$work/package/LICENSE" "$dest/"
echo "$version" >"$dest/VERSION"
(cd "$dest" && sha256sum axe.min.js LICENSE >SHA256SUMS)
echo "axe-core $version ($expected) -> $dest"
cat "$dest/SHA256SUMS"
