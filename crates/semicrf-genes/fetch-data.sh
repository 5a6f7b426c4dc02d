#!/usr/bin/env bash
# Fetches the full Drosophila melanogaster gene sets and the chr2R sequence of the AUGUSTUS
# tutorial from Debian's augustus-doc package (no installation needed) into DIR
# (default: fly-data):
#   DIR/genes.gb.train  486 annotated genes
#   DIR/genes.gb.test   100 annotated genes
#   DIR/chr2R.fa        the 21 Mb chromosome arm
set -euo pipefail
dir=${1:-fly-data}
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download augustus-doc >/dev/null)
dpkg-deb -x "$tmp"/augustus-doc_*.deb "$tmp/x"
doc="$tmp/x/usr/share/doc/augustus/tutorial"
cp "$doc/results/genes.gb.train" "$doc/results/genes.gb.test" "$doc/data/chr2R.fa" "$dir/"
ls -l "$dir"
