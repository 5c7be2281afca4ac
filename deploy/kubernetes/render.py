"""Renders a kustomization the way `kustomize build` does, for the features the
overlays here use, so deploy/kubernetes/check.sh works where neither `kustomize` nor
`kubectl` is installed; where one is, check.sh renders with both and requires the same
resources, so this renderer cannot drift from kustomize unnoticed.

  render.py DIR OUT            renders DIR's kustomization.yaml into OUT
  render.py same A B           exits 1 unless A and B hold the same resources

Understood: resources (files and directories), namespace, configMapGenerator (envs,
literals, behavior create/merge/replace, options.labels) with
generatorOptions.disableNameSuffixHash, images (name, newName, newTag, digest; in every
containers and initContainers list, as kustomize does, the Ironic's overrides
included), and replacements (one source field, optionally
one part of it by delimiter and index, into target field paths). Anything else is
refused by name rather than rendered differently from kustomize.

Runs with the kubernetes-validate venv's Python (PyYAML comes with it).
"""

import copy
import os
import sys

import yaml

KNOWN = {
    "apiVersion", "kind", "resources", "namespace", "configMapGenerator",
    "generatorOptions", "replacements", "images",
}
# Kinds that live in no namespace (the ones these manifests could contain).
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "PriorityClass", "StorageClass",
}


class RenderError(Exception):
    pass


def load_kustomization(root):
    path = os.path.join(root, "kustomization.yaml")
    try:
        with open(path) as fh:
            k = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        raise RenderError(f"{root}: no kustomization.yaml")
    unknown = set(k) - KNOWN
    if unknown:
        raise RenderError(f"{path}: not understood here: {', '.join(sorted(unknown))}")
    return path, k


def key(doc):
    m = doc.get("metadata", {})
    return (doc.get("kind"), m.get("namespace"), m.get("name"))


def read_env(path):
    """An env file as kustomize reads it: KEY=VALUE lines, # comments, blank lines."""
    out = {}
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise RenderError(f"{path}:{n}: not KEY=VALUE")
            k, v = line.split("=", 1)
            out[k] = v
    return out


def generate(root, path, gen, options, docs):
    name = gen.get("name")
    data = {}
    for env in gen.get("envs", []):
        data.update(read_env(os.path.join(root, env)))
    for lit in gen.get("literals", []):
        if "=" not in lit:
            raise RenderError(f"{path}: literal {lit!r} is not KEY=VALUE")
        k, v = lit.split("=", 1)
        data[k] = v
    extra = set(gen) - {"name", "envs", "literals", "behavior", "options"}
    if extra:
        raise RenderError(f"{path}: configMapGenerator {name}: not understood here: {sorted(extra)}")
    if not options.get("disableNameSuffixHash"):
        raise RenderError(f"{path}: only generatorOptions.disableNameSuffixHash: true is rendered here")
    labels = (gen.get("options") or {}).get("labels") or {}
    behavior = gen.get("behavior", "create")
    found = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"].get("name") == name]
    if behavior == "create":
        if found:
            raise RenderError(f"{path}: ConfigMap {name} already exists (behavior: merge?)")
        meta = {"name": name}
        if labels:
            meta["labels"] = dict(labels)
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    elif behavior in ("merge", "replace"):
        if len(found) != 1:
            raise RenderError(f"{path}: ConfigMap {name} to {behavior}: not in the resources")
        cm = found[0]
        cm["data"] = {**cm.get("data", {}), **data} if behavior == "merge" else data
        if labels:
            cm["metadata"].setdefault("labels", {}).update(labels)
    else:
        raise RenderError(f"{path}: configMapGenerator {name}: behavior {behavior!r}")


def walk(doc, field_path, path):
    """The parent object and last key of a dotted field path (no list selectors)."""
    parts = field_path.split(".")
    node = doc
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            raise RenderError(f"{path}: field {field_path} not found in {key(doc)}")
        node = node[p]
    if not isinstance(node, dict) or parts[-1] not in node:
        raise RenderError(f"{path}: field {field_path} not found in {key(doc)}")
    return node, parts[-1]


def selects(select, doc):
    for k in ("kind", "name", "namespace"):
        if k in select:
            have = doc.get("kind") if k == "kind" else doc.get("metadata", {}).get(k)
            if have != select[k]:
                return False
    return True


def replace(path, r, docs):
    src = r.get("source") or {}
    extra = set(src) - {"kind", "name", "fieldPath", "options"}
    if extra or set(r) - {"source", "targets"}:
        raise RenderError(f"{path}: replacement not understood here: {sorted(extra) or sorted(set(r))}")
    sources = [d for d in docs if selects(src, d)]
    if len(sources) != 1:
        raise RenderError(f"{path}: replacement source {src.get('kind')}/{src.get('name')}: {len(sources)} found")
    parent, last = walk(sources[0], src.get("fieldPath", "metadata.name"), path)
    value = parent[last]
    opts = src.get("options") or {}
    if "delimiter" in opts:
        parts = str(value).split(opts["delimiter"])
        i = opts.get("index", 0)
        if not 0 <= i < len(parts):
            raise RenderError(f"{path}: index {i} out of {value!r}")
        value = parts[i]
    for t in r.get("targets", []):
        if set(t) - {"select", "fieldPaths"}:
            raise RenderError(f"{path}: replacement target not understood here: {sorted(t)}")
        hit = [d for d in docs if selects(t.get("select") or {}, d)]
        if not hit:
            raise RenderError(f"{path}: replacement target {t.get('select')}: none found")
        for d in hit:
            for fp in t.get("fieldPaths", []):
                p, k = walk(d, fp, path)
                p[k] = value


def set_images(path, images, node):
    """kustomize's images: every container whose image is `name`, `name:tag` or
    `name@digest`, wherever a containers or initContainers list is."""
    if isinstance(node, list):
        for x in node:
            set_images(path, images, x)
        return
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        if k in ("containers", "initContainers") and isinstance(v, list):
            for c in v:
                for img in images:
                    if set(img) - {"name", "newName", "newTag", "digest"}:
                        raise RenderError(f"{path}: images entry not understood here: {sorted(img)}")
                    ref = c.get("image", "")
                    name = img["name"]
                    if ref == name or ref.startswith(name + ":") or ref.startswith(name + "@"):
                        rest = ref[len(name):]
                        new = img.get("newName", name)
                        if "digest" in img:
                            rest = "@" + img["digest"]
                        elif "newTag" in img:
                            rest = ":" + str(img["newTag"])
                        c["image"] = new + rest
        set_images(path, images, v)


def render(root):
    root = os.path.normpath(root)
    path, k = load_kustomization(root)
    docs = []
    for res in k.get("resources", []):
        target = os.path.join(root, res)
        if os.path.isdir(target):
            docs.extend(render(target))
        else:
            with open(target) as fh:
                docs.extend(copy.deepcopy(d) for d in yaml.safe_load_all(fh) if d)
    options = k.get("generatorOptions") or {}
    for gen in k.get("configMapGenerator", []):
        generate(root, path, gen, options, docs)
    ns = k.get("namespace")
    if ns:
        for d in docs:
            if d.get("kind") not in CLUSTER_SCOPED:
                d.setdefault("metadata", {})["namespace"] = ns
    if k.get("images"):
        set_images(path, k["images"], docs)
    for r in k.get("replacements", []):
        replace(path, r, docs)
    seen = set()
    for d in docs:
        if key(d) in seen:
            raise RenderError(f"{path}: {key(d)} twice")
        seen.add(key(d))
    return docs


def load(path):
    with open(path) as fh:
        return {key(d): d for d in yaml.safe_load_all(fh) if d}


def same(a, b):
    da, db = load(a), load(b)
    ok = True
    for k in sorted(set(da) | set(db), key=str):
        if da.get(k) != db.get(k):
            ok = False
            print(f"render.py differs from kustomize on {k}", file=sys.stderr)
            print(yaml.safe_dump({"render.py": da.get(k), "kustomize": db.get(k)}), file=sys.stderr)
    return ok


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(0 if same(sys.argv[2], sys.argv[3]) else 1)
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        out = render(sys.argv[1])
    except (RenderError, OSError, yaml.YAMLError) as e:
        sys.exit(f"render.py: {e}")
    with open(sys.argv[2], "w") as fh:
        yaml.safe_dump_all(out, fh, sort_keys=True)
