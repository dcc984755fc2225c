#!/usr/bin/env bash
# Make a plugin package from DataFlex's template: copy plugins/_template and rename it throughout.
#   NAME      your plugin's name: distribution dataflex-NAME, import name dataflex_NAME, entry point NAME
#   DATAFLEX  a DataFlex checkout (default: the current directory)
#   DEST      the new package's folder (default: ../dataflex-NAME, next to the checkout)
set -euo pipefail
NAME=${NAME:-length-tutorial}
DATAFLEX=${DATAFLEX:-.}
DEST=${DEST:-../dataflex-$NAME}

case "$NAME" in
  "" | -* | *- | *[!a-z0-9-]*) echo "NAME='$NAME': use lower-case letters, digits and inner dashes" >&2; exit 1 ;;
esac
if [ ! -f "$DATAFLEX/plugins/_template/pyproject.toml" ]; then
  echo "DATAFLEX='$DATAFLEX' has no plugins/_template: run this from a DataFlex checkout, or set DATAFLEX" >&2
  exit 1
fi
if [ -e "$DEST" ]; then
  echo "DEST='$DEST' exists already: choose another folder or remove it" >&2
  exit 1
fi
DATAFLEX=$(cd "$DATAFLEX" && pwd) # absolute paths: nothing below depends on the current directory
mkdir -p "$(dirname "$DEST")"
DEST="$(cd "$(dirname "$DEST")" && pwd)/$(basename "$DEST")"
DIST="dataflex-$NAME"
MODULE="dataflex_${NAME//-/_}"

# Build the package in a scratch folder beside DEST; only a complete package is moved into place.
WORK=$(mktemp -d "$(dirname "$DEST")/.new_plugin.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp -R "$DATAFLEX/plugins/_template" "$WORK/package"
cd "$WORK/package"
# Leftovers of installing, testing or certifying the template in its own folder.
rm -rf build dist reports .nox .pytest_cache src/*.egg-info
find . -name __pycache__ -prune -exec rm -rf {} +

mv src/dataflex_example "src/$MODULE"
for file in $(grep -rlE 'dataflex[-_]example' .); do
  sed -e "s/dataflex_example/$MODULE/g" -e "s/dataflex-example/$DIST/g" "$file" >"$file.renamed"
  mv "$file.renamed" "$file"
done
sed -e "s/^example = /$NAME = /" pyproject.toml >pyproject.toml.renamed
mv pyproject.toml.renamed pyproject.toml

mv "$WORK/package" "$DEST"
echo "$DIST (import $MODULE, entry point $NAME) is in $DEST"
