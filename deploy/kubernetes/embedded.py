"""What the manifests in deploy/kubernetes embed, for deploy/kubernetes/check.sh.

  embedded.py pods OUT FILE...   every container inside an IrSO Ironic resource
                                 (spec.overrides), wrapped in a Pod so the Kubernetes
                                 schema can check it as a core/v1 Container
  embedded.py check BIN FILE...  runs `BIN check-config` for every shardboot container
                                 with the environment the pod would give it

Runs with the kubernetes-validate venv's Python (PyYAML comes with it).
"""

import os
import subprocess
import sys

import yaml

# The address a fieldRef to status.hostIP / status.podIP stands for here: inside the
# manifests' provisioning network.
HOST_IP = os.environ.get("SB_KUBE_HOST_IP", "172.22.0.2")


def documents(files):
    for f in files:
        with open(f) as fh:
            for doc in yaml.safe_load_all(fh):
                if doc:
                    yield f, doc


def pod_specs(doc):
    """(name, pod spec) of every pod a document describes."""
    kind = doc.get("kind")
    name = doc.get("metadata", {}).get("name", "?")
    if kind in ("DaemonSet", "Deployment", "StatefulSet"):
        yield f"{kind}/{name}", doc["spec"]["template"]["spec"]
    elif kind == "Pod":
        yield f"Pod/{name}", doc["spec"]
    elif kind == "Ironic":
        o = doc.get("spec", {}).get("overrides", {})
        yield f"Ironic/{name}", {
            "containers": o.get("containers", []),
            "initContainers": o.get("initContainers", []),
            "volumes": o.get("volumes", []),
        }


def pods(out, files):
    wrapped = []
    for f, doc in documents(files):
        if doc.get("kind") != "Ironic":
            continue
        for name, spec in pod_specs(doc):
            spec = {k: v for k, v in spec.items() if v}
            wrapped.append({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name.split("/")[1] + "-overrides"},
                "spec": spec,
            })
    with open(out, "w") as fh:
        yaml.safe_dump_all(wrapped, fh)


def check(binary, files):
    docs = list(documents(files))
    config_maps = {
        d["metadata"]["name"]: d.get("data", {})
        for _, d in docs
        if d.get("kind") == "ConfigMap"
    }
    checked = 0
    for f, doc in docs:
        for name, spec in pod_specs(doc):
            for c in spec.get("containers", []):
                if "shardboot" not in c.get("image", ""):
                    continue
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                for src in c.get("envFrom", []):
                    ref = src.get("configMapRef", {}).get("name")
                    if ref not in config_maps:
                        sys.exit(f"{f}: {name}: envFrom names ConfigMap {ref!r}, not in these files")
                    env.update(config_maps[ref])
                for e in c.get("env", []):
                    if "value" in e:
                        env[e["name"]] = e["value"]
                    elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") in (
                        "status.hostIP",
                        "status.podIP",
                    ):
                        env[e["name"]] = HOST_IP
                    else:
                        sys.exit(f"{f}: {name}: cannot stand in for env {e['name']}")
                args = c.get("args", [])
                if not args or args[0] != "serve":
                    sys.exit(f"{f}: {name}/{c['name']}: args must start with serve")
                cmd = [binary, "check-config", *args[1:]]
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                print(f"{f}: {name}/{c['name']}: exit {r.returncode}")
                sys.stdout.write(r.stdout)
                sys.stdout.write(r.stderr)
                if r.returncode != 0:
                    sys.exit(1)
                checked += 1
    print(f"checked {checked} embedded shardboot environments")


if __name__ == "__main__":
    if sys.argv[1] == "pods":
        pods(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
