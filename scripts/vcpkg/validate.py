#!/usr/bin/env python3
"""Validates vcpkg manifests against vcpkg's published JSON schema (scripts/vcpkg/schema/, from
microsoft/vcpkg-tool's docs/, MIT: schema/LICENSE.txt), with python's jsonschema, offline.

    validate.py vcpkg.json ports/meld/vcpkg.json

Also checks that the validator rejects manifests that vcpkg rejects (a name with capitals, a
feature without a description, an unknown field), so that a pass means something.
"""

import copy
import json
import pathlib
import sys

import jsonschema
from referencing import Registry, Resource

SCHEMA_DIR = pathlib.Path(__file__).resolve().parent / "schema"
BASE = "https://raw.githubusercontent.com/microsoft/vcpkg-tool/main/docs/"


def make_validator():
    resources = []
    for path in SCHEMA_DIR.glob("*.schema.json"):
        contents = json.loads(path.read_text())
        # Under the name the relative $refs resolve to, and under the file's own $id.
        resources.append((BASE + path.name, Resource.from_contents(contents)))
        if contents.get("$id") and contents["$id"] != BASE + path.name:
            resources.append((contents["$id"], Resource.from_contents(contents)))
    registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMA_DIR / "vcpkg.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER)


def errors(validator, manifest):
    return sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))


def main(paths):
    validator = make_validator()
    failed = False
    manifests = {}
    for p in paths:
        manifest = json.loads(pathlib.Path(p).read_text())
        manifests[p] = manifest
        errs = errors(validator, manifest)
        for e in errs:
            where = "/".join(str(x) for x in e.absolute_path) or "(top level)"
            print(f"{p}: {where}: {e.message}")
        failed |= bool(errs)
        print(f"{p}: {'INVALID' if errs else 'valid'}")

    # Manifests the schema must refuse, made from the first one.
    first = manifests[paths[0]]
    bad = []
    m = copy.deepcopy(first)
    m["name"] = "Meld"
    bad.append(("a name with capitals", m))
    m = copy.deepcopy(first)
    m.setdefault("features", {})["extra"] = {"dependencies": []}
    bad.append(("a feature without a description", m))
    m = copy.deepcopy(first)
    m["versoin"] = "1.0"
    bad.append(("an unknown field", m))
    m = copy.deepcopy(first)
    m["version-string"] = "1.0"
    bad.append(("two versions", m))
    m = copy.deepcopy(first)
    m["dependencies"] = ["Xsimd"]  # checked through the definitions schema's $ref
    bad.append(("a dependency name with capitals", m))
    for what, m in bad:
        if not errors(validator, m):
            print(f"the schema accepted {what}: the validation checks nothing")
            failed = True
    if not failed:
        print(f"validate.py: {len(paths)} manifests valid; {len(bad)} broken ones refused")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["vcpkg.json", "ports/meld/vcpkg.json"]))
