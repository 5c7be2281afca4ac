"""What the rendered overlays of deploy/kubernetes embed, for deploy/kubernetes/check.sh.

  embedded.py pods OUT FILE...   every container inside an IrSO Ironic resource
                                 (spec.overrides), wrapped in a Pod so the Kubernetes
                                 schema can check it as a core/v1 Container
  embedded.py check BIN FILE...  runs `BIN check-config` for every shardboot container
                                 with the environment the pod would give it; files the
                                 pod gets from Secrets (member secret, Ironic password
                                 and CA, the database CA) are stood in for by
                                 temporary files; the shared store's credentials
                                 directory must be a mounted Secret with username and
                                 password; the operator token must be a 0600 copy
                                 of a Secret, made for the server's user by an init
                                 container; an IrSO Ironic's spec.networking must
                                 state the network its shardboot is given; the files
                                 of boot over TLS must come from optional Secrets
  embedded.py crd CRD... -- FILE...
                                 custom resources against their CRD's schema, unknown
                                 fields refused
  embedded.py rules METRICS FILE...
                                 every metric a PrometheusRule names is in METRICS

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
    "SHARDBOOT_HTTP__TOKEN_FILE": (lambda: secrets.token_hex(32) + "\n", 0o600),
}

# Where `--env ironic-image` looks for boot over TLS (src/config/ironic_env/tls.rs): the
# member's certificate and key, and Ironic's CA. Each must be a file of an optional
# Secret volume the container mounts: a site without TLS has no such Secret, and its
# pods must still start (TLS then stays off).
TLS_FILES = ("/certs/ipxe/tls.crt", "/certs/ipxe/tls.key", "/certs/ca/ironic/tls.crt")

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


def pod_security(docs):
    """Pods on the host's network with NET_ADMIN need the privileged Pod Security
    level: the namespace they run in, when these files hold it, must say so."""
    labels = {
        d["metadata"]["name"]: d["metadata"].get("labels") or {}
        for _, d in docs
        if d.get("kind") == "Namespace"
    }
    for f, doc in docs:
        if doc.get("kind") not in ("DaemonSet", "Deployment", "Ironic"):
            continue
        ns = doc["metadata"].get("namespace")
        if ns not in labels:
            continue
        level = labels[ns].get("pod-security.kubernetes.io/enforce")
        if level != "privileged":
            sys.exit(f"{f}: namespace {ns}: pod-security.kubernetes.io/enforce is {level!r}; "
                     "host network and NET_ADMIN need 'privileged'")
        print(f"{f}: namespace {ns}: Pod Security enforce privileged")


def check(binary, files):
    docs = list(documents(files))
    pod_security(docs)
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
                token_source(f, name, spec, c, env)
                if doc.get("kind") == "Ironic":
                    network_agrees(f, name, doc, c, env)
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
                tls_files(f, name, spec, c)
                checked += 1
    print(f"checked {checked} embedded shardboot environments")


def tls_files(f, name, spec, container):
    for path in TLS_FILES:
        v, err = mounted_file(spec, container, path)
        if not err and "secret" not in v:
            err = f"{path}: volume {v['name']!r} is not a Secret"
        if not err and not v["secret"].get("optional"):
            err = (f"{path}: Secret {v['secret']['secretName']!r} is not optional: a pod "
                   "without it would not start")
        if err:
            sys.exit(f"{f}: {name}/{container['name']}: boot over TLS: {err}")
    print(f"  boot over TLS from optional Secrets: {', '.join(TLS_FILES)}")


def run_as_user(spec, container):
    """The uid a container runs as (its own securityContext, then the pod's)."""
    for sc in (container.get("securityContext") or {}, spec.get("securityContext") or {}):
        if "runAsUser" in sc:
            return sc["runAsUser"]
    return None


def token_source(f, name, spec, c, env):
    """The operator token: a file the server reads as its own 0600 file.

    A Secret volume's files belong to root (0440 at best, with fsGroup), so the token
    must be a copy: an emptyDir on memory that an init container, running as the
    server's user, fills from a Secret no other user can read, with umask 077.
    """
    where = f"{f}: {name}/{c['name']}"
    path = env.get("SHARDBOOT_HTTP__TOKEN_FILE")
    if not path:
        sys.exit(f"{where}: no operator token (SHARDBOOT_HTTP__TOKEN_FILE): "
                 "`shardboot leases`, `members` and /v1 would refuse everything")
    v, err = mounted_file(spec, c, path)
    if err:
        sys.exit(f"{where}: operator token: {err}")
    if "secret" in v:
        sys.exit(f"{where}: operator token {path} is a Secret's file, owned by root; the "
                 "server wants its own 0600 file: copy it in an init container")
    if (v.get("emptyDir") or {}).get("medium") != "Memory":
        sys.exit(f"{where}: operator token: volume {v['name']!r} is not an emptyDir on memory")
    uid = run_as_user(spec, c)
    volumes = {x["name"]: x for x in spec.get("volumes", [])}
    for init in spec.get("initContainers", []):
        mounts = {m["name"]: m for m in init.get("volumeMounts", [])}
        if v["name"] not in mounts or mounts[v["name"]].get("readOnly"):
            continue
        cmd = " ".join(init.get("command", []) + init.get("args", []))
        secret = [volumes[n]["secret"] for n in mounts if "secret" in volumes.get(n, {})]
        if not secret or path not in cmd:
            continue
        if run_as_user(spec, init) != uid:
            sys.exit(f"{where}: operator token: init container {init['name']!r} runs as "
                     f"{run_as_user(spec, init)}, the server as {uid}: the copy is not the server's")
        if "umask 077" not in cmd:
            sys.exit(f"{where}: operator token: init container {init['name']!r} writes it "
                     "without umask 077 (the server wants 0600)")
        for sv in secret:
            modes = [sv.get("defaultMode", 0o644)] + [i["mode"] for i in sv.get("items", []) if "mode" in i]
            if any(m & 0o007 for m in modes):
                sys.exit(f"{where}: operator token: Secret {sv['secretName']!r} is readable by "
                         "every user of the pod (defaultMode)")
        print(f"{where}: operator token from Secret {secret[0]['secretName']!r}, copied by "
              f"{init['name']!r} to {path} (uid {uid}, 0600, memory)")
        return
    sys.exit(f"{where}: operator token {path}: no init container copies a Secret there")


def network_agrees(f, name, doc, c, env):
    """An IrSO Ironic's spec.networking and its shardboot's variables agree."""
    net = doc.get("spec", {}).get("networking") or {}
    dhcp = net.get("dhcp")
    if not dhcp:
        return
    first = env.get("DHCP_RANGE", "").split(";")[0].split(",")
    pairs = [
        ("spec.networking.dhcp.rangeBegin", dhcp.get("rangeBegin"), "DHCP_RANGE", first[0]),
        ("spec.networking.dhcp.rangeEnd", dhcp.get("rangeEnd"),
         "DHCP_RANGE", first[1] if len(first) > 1 else None),
        ("spec.networking.interface", net.get("interface"),
         "PROVISIONING_INTERFACE", env.get("PROVISIONING_INTERFACE")),
        ("spec.networking.ipAddress", net.get("ipAddress"),
         "PROVISIONING_IP", env.get("PROVISIONING_IP")),
    ]
    for field, ours, var, theirs in pairs:
        if ours is not None and ours != theirs:
            sys.exit(f"{f}: {name}/{c['name']}: {field} is {ours!r} but {var} gives {theirs!r}")
    print(f"{f}: {name}/{c['name']}: spec.networking agrees with DHCP_RANGE "
          f"{dhcp.get('rangeBegin')}-{dhcp.get('rangeEnd')}")


def strict(schema):
    """A CRD schema that refuses unknown fields, as kubectl's field validation does
    (the API server would otherwise prune them without a word)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            schema.pop("type", None)
            schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif isinstance(schema, list):
        schema = [strict(x) for x in schema]
    return schema


def crd(crds, files):
    import jsonschema

    schemas = {}
    for _, c in documents(crds):
        group, kind = c["spec"]["group"], c["spec"]["names"]["kind"]
        for v in c["spec"]["versions"]:
            schema = strict(v["schema"]["openAPIV3Schema"])
            # metadata is the API server's, checked by kubernetes-validate's ObjectMeta.
            schema["properties"]["metadata"] = {"type": "object"}
            schemas[(f"{group}/{v['name']}", kind)] = schema
    checked = 0
    for f, doc in documents(files):
        schema = schemas.get((doc.get("apiVersion"), doc.get("kind")))
        if schema is None:
            continue
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
        for e in errors:
            where = ".".join(str(p) for p in e.absolute_path) or "(top)"
            print(f"{f}: {doc['kind']}/{doc['metadata']['name']}: {where}: {e.message}",
                  file=sys.stderr)
        if errors:
            sys.exit(1)
        checked += 1
    print(f"checked {checked} custom resources against their CRD")


def rules(metrics_file, files):
    with open(metrics_file) as fh:
        known = {l.strip() for l in fh if l.strip()}
    # Names the source builds from a prefix (shardboot_tftp_ + name) are known by it.
    prefixes = [k for k in known if k.endswith("_")]

    def exists(m):
        for suffix in ("_bucket", "_sum", "_count", ""):
            if suffix and not m.endswith(suffix):
                continue
            base = m[: len(m) - len(suffix)] if suffix else m
            if base in known:
                return True
        return any(m.startswith(p) for p in prefixes)

    alerts = 0
    for f, doc in documents(files):
        if doc.get("kind") != "PrometheusRule":
            continue
        for g in doc["spec"]["groups"]:
            for r in g["rules"]:
                for m in re.findall(r"shardboot_[a-z_0-9]+", r["expr"]):
                    if not exists(m):
                        sys.exit(f"{f}: {r.get('alert') or r.get('record')}: no metric {m} in the source")
                alerts += "alert" in r
        print(f"{f}: alerts on existing metrics: "
              + ", ".join(r["alert"] for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r))
    print(f"checked {alerts} alerts")


if __name__ == "__main__":
    if sys.argv[1] == "pods":
        pods(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "crd":
        sep = sys.argv.index("--")
        crd(sys.argv[2:sep], sys.argv[sep + 1:])
    elif sys.argv[1] == "rules":
        rules(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
