"""What the manifests in deploy/kubernetes embed, for deploy/kubernetes/check.sh.

  embedded.py pods OUT FILE...   every container inside an IrSO Ironic resource
                                 (spec.overrides), wrapped in a Pod so the Kubernetes
                                 schema can check it as a core/v1 Container
  embedded.py check BIN FILE...  runs `BIN check-config` for every shardboot container
                                 with the environment the pod would give it; files the
                                 pod gets from Secrets (member secret, Ironic password
                                 and CA, the database CA) are stood in for by
                                 temporary files; the shared store's credentials
                                 directory must be a mounted Secret with username and
                                 password

Runs with the kubernetes-validate venv's Python (PyYAML comes with it).
"""

import os
import re
import secrets
import subprocess
import sys
import tempfile

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


# What a file the pod gets from a Secret holds here, by the variable naming it: (text,
# mode). The member secret as `openssl rand -hex 32` makes it, private as serve wants
# it; the CA is not read until serve.
STAND_INS = {
    "SHARDBOOT_OWNER__MEMBER_SECRET_FILE": (lambda: secrets.token_hex(32) + "\n", 0o600),
    "SHARDBOOT_OWNER__IRONIC__PASSWORD_FILE": (lambda: "stand-in-password\n", 0o600),
    "SHARDBOOT_OWNER__IRONIC__CA_FILE": (lambda: "stand-in CA, not read until serve\n", 0o644),
    "SHARDBOOT_STORE__CA_FILE": (lambda: "stand-in CA, not read until serve\n", 0o644),
}

# check-config's summary of the shared store names the directory the database user and
# password are read from (the mapping of ironic-image's variables decides it, no
# variable names it).
CREDENTIALS = re.compile(r"^store: shared .*\(credentials from (/[^,]*),", re.M)


def expand(value, env):
    """Kubernetes' $(VAR) references to variables defined before; $$ is a $."""

    def one(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, value)


def mounted_file(spec, container, path):
    """The volume of `container` that holds `path`, or an error message."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in sorted(container.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
        root = m["mountPath"].rstrip("/") + "/"
        if not path.startswith(root):
            continue
        v = volumes.get(m["name"])
        if v is None:
            return None, f"volume {m['name']!r} is mounted but not defined"
        items = (v.get("secret") or {}).get("items")
        rel = path[len(root):]
        if items is not None and rel not in [i["path"] for i in items]:
            return None, f"volume {m['name']!r} has no item {rel!r}"
        if "hostPath" in v:
            return None, f"{path} is on the node (hostPath {m['name']!r})"
        return v, None
    return None, f"{path} is not in any volume the container mounts"


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
                env = {}
                for src in c.get("envFrom", []):
                    ref = src.get("configMapRef", {}).get("name")
                    if ref not in config_maps:
                        sys.exit(f"{f}: {name}: envFrom names ConfigMap {ref!r}, not in these files")
                    env.update(config_maps[ref])
                for e in c.get("env", []):
                    source = e.get("valueFrom", {})
                    if "value" in e:
                        env[e["name"]] = expand(e["value"], env)
                    elif source.get("fieldRef", {}).get("fieldPath") in (
                        "status.hostIP",
                        "status.podIP",
                    ):
                        env[e["name"]] = HOST_IP
                    elif "secretKeyRef" in source:
                        env[e["name"]] = "stand-in-" + source["secretKeyRef"]["key"]
                    else:
                        sys.exit(f"{f}: {name}: cannot stand in for env {e['name']}")
                # Files from Secrets: the path must be in a volume the container mounts.
                stand_ins = tempfile.mkdtemp(prefix="shardboot-secrets-")
                stood_in = []
                for var, (text, mode) in STAND_INS.items():
                    if var not in env:
                        continue
                    _, err = mounted_file(spec, c, env[var])
                    if err:
                        sys.exit(f"{f}: {name}/{c['name']}: {var}: {err}")
                    path = os.path.join(stand_ins, var.lower())
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                    with os.fdopen(fd, "w") as fh:
                        fh.write(text())
                    os.chmod(path, mode)
                    stood_in.append(f"{var}={env[var]}")
                    env[var] = path
                env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
                args = c.get("args", [])
                if not args or args[0] != "serve":
                    sys.exit(f"{f}: {name}/{c['name']}: args must start with serve")
                cmd = [binary, "check-config", *args[1:]]
                try:
                    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                finally:
                    for n in os.listdir(stand_ins):
                        os.unlink(os.path.join(stand_ins, n))
                    os.rmdir(stand_ins)
                print(f"{f}: {name}/{c['name']}: exit {r.returncode}")
                for line in stood_in:
                    print(f"  stood in for {line}")
                sys.stdout.write(r.stdout)
                sys.stdout.write(r.stderr)
                if r.returncode != 0:
                    sys.exit(1)
                # The store's credentials: both files from a Secret the container mounts.
                m = CREDENTIALS.search(r.stdout)
                if m:
                    for key in ("username", "password"):
                        v, err = mounted_file(spec, c, f"{m.group(1)}/{key}")
                        if not err and "secret" not in v:
                            err = f"volume {v['name']!r} is not a Secret"
                        if err:
                            sys.exit(f"{f}: {name}/{c['name']}: store credentials: {err}")
                    print(f"  store credentials from a mounted Secret: {m.group(1)}")
                checked += 1
    print(f"checked {checked} embedded shardboot environments")


if __name__ == "__main__":
    if sys.argv[1] == "pods":
        pods(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
