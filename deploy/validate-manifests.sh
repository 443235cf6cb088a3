#!/usr/bin/env bash
# Validates the Kubernetes manifests of deploy/ offline:
# - core resources (DaemonSet, ConfigMap, Pod, ...) with kubernetes-validate
#   (strict: unknown fields are errors) against the schemas it bundles;
# - NetworkAttachmentDefinitions against the openAPIV3Schema of the CRD in
#   deploy/kubernetes/network-attachment-definition-crd.yaml, and their
#   spec.config through `cnitool validate` with the workspace's plugins
#   (each plugin found, supporting the version the network runs at).
# The validator is installed (pinned, deploy/validate-requirements.txt) in a
# venv under target/; the validation itself runs in a network namespace of
# its own with no network, so it cannot fetch a schema. A known-bad
# manifest is checked first: it must be rejected.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/k8s-validate-venv
kubernetes_version=1.33
if ! "$venv/bin/pip" freeze 2>/dev/null | grep -qx 'kubernetes-validate==1.37.0'; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r deploy/validate-requirements.txt
fi
for bin in cnitool rdma-sriov static cluster-ipam host-local; do
    [ -x "target/debug/$bin" ] || { echo "target/debug/$bin missing: cargo build -p $bin" >&2; exit 1; }
done

manifests=(deploy/kubernetes/*.yaml deploy/multus/*.yaml)
work=$(mktemp -d /tmp/k8s-validate.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/bad.yaml" <<'BAD'
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: bad
spec:
  selector:
    matchLabels: {app: bad}
  template:
    metadata:
      labels: {app: bad}
    spec:
      containers:
        - name: bad
          image: bad
          volumeMountz: []
BAD

offline() { unshare --net -- "$@"; }

if offline "$venv/bin/kubernetes-validate" --strict --quiet -k "$kubernetes_version" \
        "$work/bad.yaml" > "$work/bad.out" 2>&1; then
    echo "validate-manifests: a DaemonSet with an unknown field passed; the validator checks nothing" >&2
    exit 1
fi
grep -q volumeMountz "$work/bad.out" || { cat "$work/bad.out" >&2; exit 1; }
echo "ok: the validator rejects an unknown field (offline)"

# kubernetes-validate warns about kinds it has no schema for (the custom
# resources, checked below); a failure makes it exit non-zero.
offline "$venv/bin/kubernetes-validate" --strict -k "$kubernetes_version" "${manifests[@]}" \
    2>&1 | grep -v "Couldn't find schema for kind NetworkAttachmentDefinition"

offline "$venv/bin/python" - "$work" "${manifests[@]}" <<'PY'
import json, os, subprocess, sys
import jsonschema, yaml

work, paths = sys.argv[1], sys.argv[2:]
crd_path = "deploy/kubernetes/network-attachment-definition-crd.yaml"
crd = yaml.safe_load(open(crd_path))
group = crd["spec"]["group"]
kind = crd["spec"]["names"]["kind"]
schemas = {f'{group}/{v["name"]}': v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
checked = 0
for path in paths:
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc.get("kind") != kind:
            continue
        name = doc["metadata"]["name"]
        where = f"{path}: {kind} {name}"
        schema = schemas.get(doc.get("apiVersion"))
        if schema is None:
            sys.exit(f"{where}: apiVersion {doc.get('apiVersion')} is not served by {crd_path}")
        # OpenAPI v3 as the API server reads it, here as JSON Schema;
        # unknown fields are pruned by the server, so they fail here.
        def strict(node):
            if isinstance(node, dict):
                if node.get("type") == "object" and "properties" in node:
                    node.setdefault("additionalProperties", False)
                for value in node.values():
                    strict(value)
            return node
        jsonschema.validate(doc, strict(json.loads(json.dumps(schema))))
        conf = json.loads(doc["spec"]["config"])
        if conf.get("name") != name:
            print(f"note: {where}: the CNI network is named {conf.get('name')!r}")
        folder = os.path.join(work, name)
        os.mkdir(folder)
        ext = "conflist" if "plugins" in conf else "conf"
        with open(os.path.join(folder, f"{name}.{ext}"), "w") as f:
            json.dump(conf, f)
        env = dict(os.environ, NETCONFPATH=folder, CNI_PATH=os.path.abspath("target/debug"))
        run = subprocess.run(["target/debug/cnitool", "validate"], env=env,
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{where}: cnitool validate of spec.config failed:\n{run.stdout}{run.stderr}")
        print(f"ok: {where} matches the CRD's schema; cnitool validate of spec.config passed")
        checked += 1
if checked == 0:
    sys.exit("no NetworkAttachmentDefinition found")
PY
echo "manifests valid: ${manifests[*]}"
