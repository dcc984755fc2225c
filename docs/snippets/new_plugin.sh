#!/usr/bin/env bash
# Make a plugin package from the template. DATAFLEX is a DataFlex checkout, DEST the new package.
set -euo pipefail
DATAFLEX=${DATAFLEX:-.}
DEST=${DEST:-../dataflex-length-tutorial}

cp -r "$DATAFLEX/plugins/_template" "$DEST"
cd "$DEST"
rm -rf build src/*.egg-info # build leftovers, if the template was ever installed from its folder

# Rename: distribution dataflex-example -> dataflex-length-tutorial, import name
# dataflex_example -> dataflex_length_tutorial, entry point example -> length-tutorial.
mv src/dataflex_example src/dataflex_length_tutorial
grep -rl 'dataflex_example\|dataflex-example' . | xargs sed -i \
    -e 's/dataflex_example/dataflex_length_tutorial/g' -e 's/dataflex-example/dataflex-length-tutorial/g'
sed -i 's/^example = /length-tutorial = /' pyproject.toml

# Replace the example components and their tests with yours (the two tutorial modules).
rm src/dataflex_length_tutorial/scorers.py src/dataflex_length_tutorial/reweighters.py tests/test_example.py
cp "$DATAFLEX/docs/snippets/length_zscore.py" "$DATAFLEX/docs/snippets/zscore_tilt.py" src/dataflex_length_tutorial/
cp "$DATAFLEX/docs/snippets/plugin_init.py" src/dataflex_length_tutorial/__init__.py
cp "$DATAFLEX/docs/snippets/plugin_test_conformance.py" tests/test_conformance.py
