"""Renders every overlay of deploy/k8s and checks each object against the
Kubernetes API models of Debian's python3-kubernetes (Kubernetes 1.22), field
by field, plus what the objects must mean for a shardps job.

Run by //tests/deploy:k8s_manifests_test (cwd = the runfiles root).
"""

import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml
from kubernetes import client as k8s

sys.path.insert(0, os.path.join(os.getcwd(), "deploy", "k8s"))
import render  # noqa: E402  (deploy/k8s/render.py)

K8S = "deploy/k8s"
OVERLAYS = ["cpu", "gpu"]
CONFIG_CHECK = os.environ.get("PS_CONFIG_CHECK", "common/ps_config_check")

# (apiVersion, kind) -> model class name in kubernetes.client.
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("batch/v1", "Job"): "V1Job",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}

# Fields typed 'dict(str, str)' in the models that hold resource.Quantity
# values, which the API also takes as YAML numbers (`nvidia.com/gpu: 1`).
QUANTITY_MAPS = {"limits", "requests"}


def validate(value, type_name, path, errors, field=""):
    """Appends to `errors` every way `value` does not fit model type `type_name`."""
    if type_name == "object":  # IntOrString and the like: anything scalar.
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            errors.append("%s: expected int or string, got %r" % (path, value))
        return
    if type_name == "str":
        if not isinstance(value, str):
            errors.append("%s: expected string, got %r" % (path, value))
        return
    if type_name == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append("%s: expected integer, got %r" % (path, value))
        return
    if type_name == "bool":
        if not isinstance(value, bool):
            errors.append("%s: expected boolean, got %r" % (path, value))
        return
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            errors.append("%s: expected a list, got %r" % (path, value))
            return
        for i, item in enumerate(value):
            validate(item, m.group(1), "%s[%d]" % (path, i), errors)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            errors.append("%s: expected a map, got %r" % (path, value))
            return
        inner = m.group(1)
        for k, v in value.items():
            if not isinstance(k, str):
                errors.append("%s: key %r is not a string" % (path, k))
            if field in QUANTITY_MAPS and isinstance(v, (int, float)) and not isinstance(v, bool):
                continue
            validate(v, inner, "%s.%s" % (path, k), errors)
        return
    model = getattr(k8s, type_name, None)
    if model is None:
        errors.append("%s: no model %s in kubernetes.client" % (path, type_name))
        return
    if not isinstance(value, dict):
        errors.append("%s: expected a %s object, got %r" % (path, type_name, value))
        return
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            errors.append("%s: unknown field %r (not in %s)" % (path, key, type_name))
            continue
        attr = by_json[key]
        validate(item, model.openapi_types[attr], "%s.%s" % (path, key), errors, key)


def validate_object(obj):
    """All schema errors of one rendered object; [] if it fits its model."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    name = "%s/%s" % (obj.get("kind"), obj.get("metadata", {}).get("name"))
    if key not in MODELS:
        return ["%s: no model for %s" % (name, key)]
    errors = []
    validate(obj, MODELS[key], name, errors)
    if not errors:
        # The models' constructors check required fields and enums.
        try:
            k8s.ApiClient()._ApiClient__deserialize(copy.deepcopy(obj), MODELS[key])
        except (ValueError, TypeError) as e:
            errors.append("%s: %s" % (name, e))
    return errors


def job_shape():
    """num_servers, max_servers, num_workers and data fields of base/job.pbtxt, defaults filled in."""
    out = os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "job_full.pbtxt")
    subprocess.run([CONFIG_CHECK, os.path.join(K8S, "base", "job.pbtxt"), "--write=" + out],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        text = f.read()

    def field(name):
        m = re.search(r"\b%s: \"?([^\"\n]*)\"?" % name, text)
        return m.group(1) if m else None

    return {k: field(k) for k in ["num_servers", "max_servers", "num_workers", "synthetic_dir",
                                  "synthetic_train_lines", "synthetic_eval_lines",
                                  "synthetic_seed", "dir"]}


def pod_spec(obj):
    spec = obj.get("spec", {})
    return spec["template"]["spec"] if "template" in spec else None


def containers(obj):
    spec = pod_spec(obj) or {}
    return spec.get("containers", []) + spec.get("initContainers", [])


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


class ManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rendered = {o: render.render(os.path.join(K8S, "overlays", o)) for o in OVERLAYS}
        cls.shape = job_shape()

    def find(self, overlay, kind, name):
        for obj in self.rendered[overlay]:
            if obj["kind"] == kind and obj["metadata"]["name"] == name:
                return obj
        self.fail("%s: no %s/%s" % (overlay, kind, name))

    def test_every_object_fits_the_api_schema(self):
        for overlay, objects in self.rendered.items():
            kinds = sorted(o["kind"] for o in objects)
            self.assertEqual(kinds, ["ConfigMap", "Deployment", "Deployment", "Job", "Namespace",
                                     "PersistentVolumeClaim", "PodDisruptionBudget",
                                     "Service", "Service", "Service", "StatefulSet"], overlay)
            for obj in objects:
                self.assertEqual(validate_object(obj), [], overlay)

    def test_a_misspelled_field_fails(self):
        job = copy.deepcopy(self.find("cpu", "Job", "ps-worker"))
        job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
        errors = validate_object(job)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("containers[0]: unknown field 'imagePullPolicyy'", errors[0])
        sts = copy.deepcopy(self.find("cpu", "StatefulSet", "ps-server"))
        sts["spec"]["replicas"] = "2"
        self.assertIn("expected integer", " ".join(validate_object(sts)))
        svc = copy.deepcopy(self.find("cpu", "Service", "ps-scheduler"))
        del svc["spec"]["ports"][0]["port"]  # required
        self.assertTrue(validate_object(svc))
        probe = copy.deepcopy(self.find("cpu", "Deployment", "ps-scheduler"))
        probe["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"] = {
            "port": 7070}  # Kubernetes 1.24+ only: our probes must not use it.
        self.assertIn("unknown field 'grpc'", " ".join(validate_object(probe)))

    def test_workers_are_an_indexed_job_of_num_workers(self):
        workers = int(self.shape["num_workers"])
        for overlay in OVERLAYS:
            spec = self.find(overlay, "Job", "ps-worker")["spec"]
            self.assertEqual(spec["completionMode"], "Indexed")
            self.assertEqual(spec["completions"], workers)
            self.assertEqual(spec["parallelism"], workers)
            worker = spec["template"]["spec"]["containers"][0]
            self.assertEqual(worker["args"][0], "worker")
            self.assertEqual(env_of(worker)["SHARDPS_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"],
                             "metadata.annotations['batch.kubernetes.io/job-completion-index']")

    def test_servers_are_a_statefulset_of_num_servers(self):
        for overlay in OVERLAYS:
            sts = self.find(overlay, "StatefulSet", "ps-server")
            self.assertEqual(sts["spec"]["replicas"], int(self.shape["num_servers"]))
            svc = self.find(overlay, "Service", sts["spec"]["serviceName"])
            self.assertEqual(svc["spec"]["clusterIP"], "None")
            server = sts["spec"]["template"]["spec"]["containers"][0]
            env = env_of(server)
            self.assertEqual(env["SHARDPS_ADVERTISE"]["value"],
                             "$(POD_NAME).%s:7000" % svc["metadata"]["name"])
            pdb = self.find(overlay, "PodDisruptionBudget", "ps-server")
            self.assertEqual(pdb["spec"]["selector"]["matchLabels"],
                             sts["spec"]["selector"]["matchLabels"])

    def checkpoint_mounts(self, obj, read_only=False):
        """{container name: mountPath} of every container of `obj` that mounts
        the shardps-checkpoints claim (read-only if `read_only`)."""
        spec = pod_spec(obj)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        out = {}
        for c in containers(obj):
            for m in c.get("volumeMounts", []):
                claim = volumes.get(m["name"], {}).get("persistentVolumeClaim", {})
                if claim.get("claimName") == "shardps-checkpoints":
                    self.assertEqual(m.get("readOnly", False), read_only,
                                     (obj["kind"], c["name"]))
                    self.assertFalse(claim.get("readOnly", False), obj["kind"])
                    out[c["name"]] = m["mountPath"]
        return out

    def test_checkpoints_on_one_shared_read_write_many_claim(self):
        # Every server reads every server's checkpoint files (a restore onto
        # any number of servers) and the scheduler writes the MANIFEST and
        # resumes from the directory: one RWX volume, mounted by all of them
        # at the config's checkpoint.dir.
        ckpt_dir = self.shape["dir"]
        self.assertTrue(ckpt_dir and ckpt_dir.startswith("/var/lib/shardps/checkpoints"),
                        "base/job.pbtxt needs checkpoint.dir under /var/lib/shardps/checkpoints")
        for overlay in OVERLAYS:
            pvc = self.find(overlay, "PersistentVolumeClaim", "shardps-checkpoints")
            self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"], overlay)
            self.assertIn("storage", pvc["spec"]["resources"]["requests"])
            # No provider's class in the base: the cluster's default, or an
            # overlay's patch, names an RWX-capable one.
            self.assertNotIn("storageClassName", pvc["spec"], overlay)
            sched = self.find(overlay, "Deployment", "ps-scheduler")
            self.assertEqual(self.checkpoint_mounts(sched), {"scheduler": ckpt_dir}, overlay)
            sts = self.find(overlay, "StatefulSet", "ps-server")
            self.assertEqual(self.checkpoint_mounts(sts), {"server": ckpt_dir}, overlay)
            self.assertFalse(sts["spec"].get("volumeClaimTemplates"),
                             "%s: per-server volumes hide each shard's files from the others"
                             % overlay)
            for obj in self.rendered[overlay]:
                spec = pod_spec(obj)
                if spec is None:
                    continue
                # fsGroup makes the volume writable by the pods' user.
                self.assertEqual(spec["securityContext"]["fsGroup"],
                                 spec["securityContext"]["runAsGroup"], obj["kind"])
                if obj["kind"] == "Job":  # Workers read checkpoints to evaluate them.
                    self.assertEqual(self.checkpoint_mounts(obj, read_only=True),
                                     {"worker": ckpt_dir}, overlay)
            # Serving replicas follow the checkpoints; they only read them.
            replica = self.find(overlay, "Deployment", "ps-replica")
            self.assertEqual(self.checkpoint_mounts(replica, read_only=True),
                             {"replica": ckpt_dir}, overlay)

    def test_every_member_holds_the_job_secret(self):
        # docs/security.md, "Membership": the scheduler, every server, every
        # worker and every serving replica (it follows the servers' stream)
        # read the job's secret from the shardps-job-secret
        # Secret, mounted read-only and closed to others (the binaries refuse
        # a file others may read).
        for overlay in OVERLAYS:
            members = 0
            for obj in self.rendered[overlay]:
                spec = pod_spec(obj)
                if spec is None:
                    continue
                volumes = {v["name"]: v for v in spec.get("volumes", [])}
                for c in spec.get("containers", []):
                    if c["name"] not in ("scheduler", "server", "worker", "replica"):
                        continue
                    members += 1
                    path = env_of(c).get("SHARDPS_JOB_SECRET_FILE", {}).get("value", "")
                    mounts = [m for m in c.get("volumeMounts", [])
                              if path.startswith(m["mountPath"].rstrip("/") + "/")]
                    self.assertEqual(len(mounts), 1, (overlay, c["name"], path))
                    self.assertTrue(mounts[0].get("readOnly"), (overlay, c["name"]))
                    secret = volumes[mounts[0]["name"]].get("secret", {})
                    self.assertEqual(secret.get("secretName"), "shardps-job-secret",
                                     (overlay, c["name"]))
                    self.assertEqual(secret.get("defaultMode", 0o644) & 0o027, 0,
                                     (overlay, c["name"]))
            self.assertEqual(members, 4, overlay)

    def test_gpu_only_in_the_gpu_overlay(self):
        self.assertNotIn("nvidia.com/gpu", yaml.safe_dump_all(self.rendered["cpu"]))
        self.assertNotIn("cuda", yaml.safe_dump_all(self.rendered["cpu"]))
        for overlay in OVERLAYS:
            for obj in self.rendered[overlay]:
                for c in containers(obj):
                    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
                    device = env_of(c).get("SHARDPS_DEVICE", {}).get("value")
                    is_gpu_worker = overlay == "gpu" and c["name"] == "worker"
                    self.assertEqual(gpus, 1 if is_gpu_worker else None, (overlay, c["name"]))
                    if c["name"] == "worker":
                        self.assertEqual(device, "cuda" if is_gpu_worker else "cpu")

    def test_pods_have_probes_resources_and_scrape_annotations(self):
        for overlay in OVERLAYS:
            for obj in self.rendered[overlay]:
                spec = pod_spec(obj)
                if spec is None:
                    continue
                ann = obj["spec"]["template"]["metadata"]["annotations"]
                self.assertEqual(ann["prometheus.io/scrape"], "true")
                self.assertEqual(ann["prometheus.io/path"], "/metrics")
                main = spec["containers"][0]
                ports = {p["containerPort"] for p in main["ports"]}
                self.assertIn(int(ann["prometheus.io/port"]), ports)
                self.assertTrue(spec["securityContext"]["runAsNonRoot"])
                for c in containers(obj):
                    for part in ("requests", "limits"):
                        self.assertIn("cpu", c["resources"][part], c["name"])
                        self.assertIn("memory", c["resources"][part], c["name"])
                if main["name"] == "replica":
                    self.assertEqual(main["args"][0], "replica")
                    self.assertEqual(env_of(main)["SHARDPS_LISTEN"]["value"], "0.0.0.0:7100")
                    cmd = main["readinessProbe"]["exec"]["command"]
                    self.assertEqual(cmd, ["ps_health", "--addr=127.0.0.1:7100"])
                    self.assertEqual(main["livenessProbe"]["tcpSocket"]["port"], "grpc")
                    svc = self.find(overlay, "Service", "ps-replica")
                    self.assertEqual(svc["spec"]["selector"],
                                     obj["spec"]["selector"]["matchLabels"])
                    self.assertIn(7100, [p["port"] for p in svc["spec"]["ports"]])
                    # It follows the servers' stream: the scheduler names them.
                    self.assertEqual(env_of(main)["SHARDPS_SCHEDULER"]["value"],
                                     "ps-scheduler:7070")
                if main["name"] in ("scheduler", "server"):
                    port = [p["containerPort"] for p in main["ports"] if p["name"] == "grpc"][0]
                    for probe in ("readinessProbe", "livenessProbe"):
                        cmd = main[probe]["exec"]["command"]
                        self.assertEqual(cmd[0], "ps_health")
                        self.assertIn("--addr=127.0.0.1:%d" % port, cmd)

    def test_references_resolve(self):
        for overlay in OVERLAYS:
            objects = self.rendered[overlay]
            names = {(o["kind"], o["metadata"]["name"]) for o in objects}
            for obj in objects:
                if obj["kind"] != "Namespace":
                    self.assertEqual(obj["metadata"]["namespace"], "shardps")
                spec = pod_spec(obj)
                if spec is None:
                    continue
                for v in spec.get("volumes", []):
                    if "configMap" in v:
                        self.assertIn(("ConfigMap", v["configMap"]["name"]), names)
                    if "persistentVolumeClaim" in v:
                        self.assertIn(("PersistentVolumeClaim",
                                       v["persistentVolumeClaim"]["claimName"]), names)
                for c in containers(obj):
                    sched = env_of(c).get("SHARDPS_SCHEDULER")
                    if sched:
                        host, port = sched["value"].split(":")
                        svc = self.find(overlay, "Service", host)
                        self.assertIn(int(port), [p["port"] for p in svc["spec"]["ports"]])
                    self.assertTrue(c["image"].startswith("shardps:"), c["image"])
            config = self.find(overlay, "ConfigMap", "shardps-config")
            with open(os.path.join(K8S, "base", "job.pbtxt")) as f:
                self.assertEqual(config["data"]["job.pbtxt"], f.read())

    def test_job_config_is_the_default_job_with_cluster_paths(self):
        def normalized(path):
            out = os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()),
                               os.path.basename(os.path.dirname(path)) + ".norm")
            subprocess.run([CONFIG_CHECK, path, "--synthetic_dir=/data/synthetic",
                            "--write=" + out], check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                text = re.sub(r"checkpoint \{[^}]*\}\n?", "", f.read())
                return re.sub(r"\n  max_servers: \d+", "", text)
        self.assertEqual(normalized(os.path.join(K8S, "base", "job.pbtxt")),
                         normalized("configs/default.pbtxt"),
                         "deploy/k8s/base/job.pbtxt must be configs/default.pbtxt with only "
                         "data.synthetic_dir, checkpoint and cluster.max_servers changed: "
                         "update it")

    def test_the_server_statefulset_may_grow(self):
        # `kubectl scale statefulset/ps-server` up to max_servers starts spares
        # (docs/operations.md, "Changing the number of servers").
        max_servers = int(self.shape["max_servers"])
        self.assertGreater(max_servers, int(self.shape["num_servers"]))
        for overlay in OVERLAYS:
            sts = self.find(overlay, "StatefulSet", "ps-server")
            self.assertLessEqual(sts["spec"]["replicas"], max_servers)

    def test_datagen_matches_the_config(self):
        init = self.find("cpu", "Job", "ps-worker")["spec"]["template"]["spec"]["initContainers"][0]
        self.assertEqual(init["args"][0], "ps_datagen")
        flags = dict(a[2:].split("=", 1) for a in init["args"][1:])
        self.assertEqual(flags, {"out_dir": self.shape["synthetic_dir"],
                                 "train_lines": self.shape["synthetic_train_lines"],
                                 "eval_lines": self.shape["synthetic_eval_lines"],
                                 "seed": self.shape["synthetic_seed"]})

    def test_render_matches_kubectl_kustomize(self):
        # ./shardps deps installs kubectl (Debian's kubernetes-client, 1.20,
        # whose kustomize renders these overlays as newer ones do): without
        # it the comparison cannot run, and that is a failure, not a skip.
        kubectl = shutil.which("kubectl")
        self.assertIsNotNone(kubectl, "no kubectl on PATH (%s): run ./shardps deps "
                             "(Debian's kubernetes-client)" % os.environ.get("PATH"))
        # Bazel's runfiles are symlinks, which kustomize's load restrictor
        # refuses: render a real copy.
        tree = os.path.join(tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR")), "k8s")
        shutil.copytree(K8S, tree, symlinks=False)
        for overlay in OVERLAYS:
            res = subprocess.run([kubectl, "kustomize", os.path.join(tree, "overlays", overlay)],
                                 capture_output=True, text=True)
            self.assertEqual(res.returncode, 0, res.stderr)
            out = res.stdout
            theirs = list(yaml.safe_load_all(out))
            self.assertEqual(normalize(theirs), normalize(self.rendered[overlay]), overlay)


def normalize(objects):
    """Objects sorted by kind/name, with named lists (env, ...) in name order:
    kustomize versions differ in where a patch's new list items go."""
    def sort_named(x):
        if isinstance(x, dict):
            return {k: sort_named(v) for k, v in x.items()}
        if isinstance(x, list):
            items = [sort_named(v) for v in x]
            if items and all(isinstance(v, dict) and "name" in v for v in items):
                items.sort(key=lambda v: str(v["name"]))
            return items
        return x
    return sorted((sort_named(o) for o in objects),
                  key=lambda o: (o["kind"], o["metadata"]["name"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
