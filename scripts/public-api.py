#!/usr/bin/env python3
"""Lists a crate's public API from rustdoc's JSON: every item a user can
name (modules, types, traits, functions, constants, macros, re-exports),
and the inherent methods of its types, one line each, sorted.

    public-api.py CRATE.json > api.txt
"""
import json
import sys

KINDS = ["module", "struct", "enum", "trait", "function", "constant", "static",
         "type_alias", "macro", "union", "proc_macro", "trait_alias"]


def kind_of(item):
    inner = item["inner"]
    return next(iter(inner)) if isinstance(inner, dict) else inner


def main(path):
    doc = json.load(open(path))
    index, paths = doc["index"], doc["paths"]
    lines = set()
    seen = set()

    def describe_methods(prefix, item):
        inner = item["inner"][kind_of(item)]
        for impl_id in inner.get("impls", []):
            impl = index.get(str(impl_id))
            if impl is None:
                continue
            body = impl["inner"]["impl"]
            if body.get("trait") is not None or body.get("synthetic") or body.get("blanket_impl"):
                continue
            for method_id in body["items"]:
                method = index.get(str(method_id))
                if method and method.get("visibility") == "public" and method.get("name"):
                    lines.add(f"{kind_of(method)} {prefix}::{method['name']}")
        if kind_of(item) == "trait":
            for method_id in inner.get("items", []):
                method = index.get(str(method_id))
                if method and method.get("name"):
                    lines.add(f"trait-item {prefix}::{method['name']}")

    def walk(prefix, module_id):
        if (prefix, module_id) in seen:
            return
        seen.add((prefix, module_id))
        module = index[str(module_id)]
        for item_id in module["inner"]["module"]["items"]:
            item = index.get(str(item_id))
            if item is None or item.get("visibility") != "public":
                continue
            kind = kind_of(item)
            if kind == "use":
                use = item["inner"]["use"]
                target = use.get("id")
                if use.get("is_glob"):
                    if target is not None and str(target) in index:
                        walk(prefix, target)
                    else:
                        lines.add(f"use {prefix}::* = {use['source']}::*")
                    continue
                name = use["name"]
                if target is not None and str(target) in index:
                    resolved = index[str(target)]
                    inline(f"{prefix}::{name}", resolved, target)
                else:
                    where = paths.get(str(target), {}).get("path") if target is not None else None
                    lines.add(f"use {prefix}::{name} = {'::'.join(where) if where else use['source']}")
                continue
            inline(f"{prefix}::{item['name']}", item, item_id)

    def inline(path, item, item_id):
        kind = kind_of(item)
        if kind == "module":
            lines.add(f"module {path}")
            walk(path, item_id)
        elif kind in KINDS:
            lines.add(f"{kind} {path}")
            if kind in ("struct", "enum", "union", "trait"):
                describe_methods(path, item)

    root = index[str(doc["root"])]
    walk(root["name"], doc["root"])
    print("\n".join(sorted(lines)))


if __name__ == "__main__":
    main(sys.argv[1])
