#!/usr/bin/env python3
"""render.py: renders a kustomization the way `kubectl kustomize` does, for the
subset of kustomize that deploy/k8s uses, with nothing but Python and PyYAML.

    python3 deploy/k8s/render.py deploy/k8s/overlays/cpu > cpu.yaml

Why: Debian 12's kubectl (kubernetes-client 1.20) renders these manifests,
but it cannot be installed next to the `kubectl` package of Google's
repository (both own /usr/bin/kubectl), so the tests do not depend on it. The
tests render with this script and, when a `kubectl` is on PATH, check that
`kubectl kustomize` gives the same objects.

Supported kustomization fields: resources (files and directories), bases,
namespace, images (newName/newTag/digest), patchesStrategicMerge (maps merge,
lists of named items merge by name, other lists are replaced),
configMapGenerator (files, literals; behavior create or replace) with generatorOptions
disableNameSuffixHash: true. Anything else is refused with an error naming the
field, so the script never renders something different in silence.
"""

import os
import sys

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "bases", "namespace", "images",
             "patchesStrategicMerge", "configMapGenerator", "generatorOptions"}

# Kinds that have no namespace (the ones we could plausibly use).
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                  "StorageClass", "CustomResourceDefinition", "PriorityClass"}

# Strategic-merge keys of the lists we patch (Kubernetes' patchMergeKey).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
              "volumeClaimTemplates": None}


class RenderError(Exception):
    pass


def _load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _key(obj):
    return (obj.get("apiVersion"), obj.get("kind"), obj.get("metadata", {}).get("name"))


def strategic_merge(base, patch, field=None):
    """Returns base with patch merged in (strategic merge patch subset)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = v
        return out
    if isinstance(base, list) and isinstance(patch, list) and MERGE_KEYS.get(field):
        key = MERGE_KEYS[field]
        out = list(base)
        for item in patch:
            for i, old in enumerate(out):
                if isinstance(old, dict) and old.get(key) == item.get(key):
                    out[i] = strategic_merge(old, item)
                    break
            else:
                out.append(item)
        return out
    return patch


def _set_images(obj, images):
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec") if "template" in spec else spec
    if not isinstance(pod, dict):
        return
    for field in ("containers", "initContainers"):
        for c in pod.get(field, []) or []:
            image = c.get("image", "")
            name = image.split("@")[0]
            if ":" in name.rsplit("/", 1)[-1]:
                name = name.rsplit(":", 1)[0]
            for img in images:
                if img["name"] != name:
                    continue
                new = img.get("newName", name)
                if "digest" in img:
                    new += "@" + img["digest"]
                elif "newTag" in img:
                    new += ":" + str(img["newTag"])
                elif image != name:
                    new += image[len(name):]
                c["image"] = new


def _config_maps(kust, root):
    opts = kust.get("generatorOptions", {}) or {}
    if kust.get("configMapGenerator") and opts.get("disableNameSuffixHash") is not True:
        raise RenderError("%s: only configMapGenerator with disableNameSuffixHash: true "
                          "is supported" % root)
    out = []
    for gen in kust.get("configMapGenerator", []) or []:
        unknown = set(gen) - {"name", "files", "literals", "behavior"}
        if unknown:
            raise RenderError("%s: configMapGenerator fields %s not supported" % (root, unknown))
        data = {}
        for entry in gen.get("files", []) or []:
            key, _, rel = entry.partition("=") if "=" in entry else (os.path.basename(entry), "", entry)
            path = os.path.normpath(os.path.join(root, rel))
            if not path.startswith(os.path.abspath(root) + os.sep):
                raise RenderError("%s: %s is outside the kustomization root" % (root, rel))
            with open(path) as f:
                data[key] = f.read()
        for lit in gen.get("literals", []) or []:
            k, _, v = lit.partition("=")
            data[k] = v
        if gen.get("behavior", "create") not in ("create", "replace"):
            raise RenderError("%s: configMapGenerator behavior %s not supported"
                              % (root, gen["behavior"]))
        out.append(({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": gen["name"]}, "data": data},
                    gen.get("behavior", "create")))
    return out


def render(root):
    """Returns the list of objects the kustomization in directory `root` makes."""
    root = os.path.abspath(root)
    path = os.path.join(root, "kustomization.yaml")
    if not os.path.isfile(path):
        raise RenderError("%s: no kustomization.yaml" % root)
    kust = _load_yaml_docs(path)[0]
    unknown = set(kust) - SUPPORTED
    if unknown:
        raise RenderError("%s: fields not supported by render.py: %s" % (path, sorted(unknown)))
    objects = []
    for res in (kust.get("bases") or []) + (kust.get("resources") or []):
        full = os.path.join(root, res)
        objects += render(full) if os.path.isdir(full) else _load_yaml_docs(full)
    for config_map, behavior in _config_maps(kust, root):
        if behavior == "replace":
            old = [o for o in objects if _key(o) == _key(config_map)]
            if not old:
                raise RenderError("%s: configMapGenerator %s replaces nothing"
                                  % (root, config_map["metadata"]["name"]))
            if "namespace" in old[0]["metadata"]:
                config_map["metadata"]["namespace"] = old[0]["metadata"]["namespace"]
            objects.remove(old[0])
        objects.append(config_map)
    seen = set()
    for obj in objects:
        if _key(obj) in seen:
            raise RenderError("%s: %s defined twice" % (root, _key(obj)))
        seen.add(_key(obj))
    for rel in kust.get("patchesStrategicMerge") or []:
        for patch in _load_yaml_docs(os.path.join(root, rel)):
            matches = [i for i, o in enumerate(objects) if _key(o) == _key(patch)]
            if not matches:
                raise RenderError("%s: patch %s matches no object" % (rel, _key(patch)))
            objects[matches[0]] = strategic_merge(objects[matches[0]], patch)
    if kust.get("images"):
        for obj in objects:
            _set_images(obj, kust["images"])
    if kust.get("namespace"):
        for obj in objects:
            if obj.get("kind") not in CLUSTER_SCOPED:
                obj.setdefault("metadata", {})["namespace"] = kust["namespace"]
    return objects


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: render.py KUSTOMIZATION_DIR\n")
        return 2
    try:
        objects = render(argv[1])
    except (RenderError, OSError, yaml.YAMLError) as e:
        sys.stderr.write("render.py: %s\n" % e)
        return 1
    sys.stdout.write(yaml.safe_dump_all(objects, default_flow_style=False, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
