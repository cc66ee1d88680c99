#!/usr/bin/env bash
# Put containerd's data root and kubelet's directory on the instance group's EBS volume, which HyperPod
# mounts at /opt/sagemaker (SageMaker API ClusterEbsVolumeConfig), so that images (a DLC image is ~20 GB
# compressed) and pods' logs and emptyDirs do not fill the root volume, whose size AWS chooses.
#
# containerd: on AL2023 AMIs nodeadm writes /etc/containerd/config.toml itself, at every boot, so an
# edit of that file does not last, and at OnCreate the file may not exist yet. As AWS's reference
# lifecycle script does (awslabs/awsome-distributed-training, formerly aws-samples: 1.architectures/
# 7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh, its AL2023 branch, from PRs
# #825, #827, #884 and #907, after PR #820 had found nodeadm overwriting containerd's config),
# containerd gets a config of its own on the volume, /opt/sagemaker/containerd/config.toml, which a
# systemd drop-in passes with --config, followed by `systemctl daemon-reload`. That config is the AMI's
# (nodeadm's) with only its top-level root changed when there is one; else a complete one with what
# nodeadm writes for a GPU node (awslabs/amazon-eks-ami, nodeadm/internal/containerd/
# config.template.toml): the nvidia runtime as default, the pause image the AMI caches as sandbox
# image, CDI on. It is schema version 2, which both containerd lines of AL2023 AMIs load (1.7 refuses
# version 3; 2.x migrates version 2 when loading). containerd's state is copied onto the volume first,
# so the preloaded pause image comes along. Unlike AWS's script, this one has containerd load the
# config (`containerd config dump`) before using it, and stops containerd for the copy and starts it
# again if it was running (AWS's copies without stopping it and leaves the start to nodeadm).
#
# The drop-in lives on the root volume, the rest on the EBS volume, which outlives the root volume
# (an AMI update replaces only the latter): without our drop-in, the volume's containerd and kubelet
# directories are left over from an earlier root volume and are replaced, as AWS's script does. A
# second run on the same root volume changes nothing; a node without the volume (a CPU group with no
# storage config) is left as the AMI set it up.
set -euo pipefail

ROOT="${LLM_INFRA_ROOT:-}" # the tests' sandbox; empty on a node
VOLUME="/opt/sagemaker"
# The node's paths (what the written files name); $ROOT is prepended only to read and write them.
DATA_ROOT="$VOLUME/containerd/data-root"
CONFIG="$VOLUME/containerd/config.toml"
AMI_CONFIG="/etc/containerd/config.toml"
AMI_STATE="/var/lib/containerd"
CONTAINERD="/usr/bin/containerd"
DROP_IN="/etc/systemd/system/containerd.service.d/90-llm-infra-containerd-config.conf"
# The tag AL2023 AMIs cache the pause image under at build time, and nodeadm's default sandbox image
# (amazon-eks-ami: templates/al2023/runtime/bin/cache-pause-container, nodeadm/cmd/nodeadm/init/init.go).
SANDBOX_IMAGE="localhost/kubernetes/pause:latest"
NVIDIA_RUNTIME="/usr/bin/nvidia-container-runtime"
KUBELET="/var/lib/kubelet"
NEW_KUBELET="$VOLUME/kubelet"

say() { echo "configure_container_storage: $*"; }
fail() {
  echo "configure_container_storage: $*" >&2
  exit 2
}

if ! mountpoint -q "$ROOT$VOLUME"; then
  say "$VOLUME is not mounted (no EBS volume for this group); nothing to do"
  exit 0
fi

drop_in() {
  cat <<EOF
# Written by llm-infra's HyperPod lifecycle script (configure_container_storage.sh): containerd reads
# its config from the instance group's EBS volume; nodeadm's $AMI_CONFIG is not used.
[Service]
ExecStart=
ExecStart=$CONTAINERD --config $CONFIG
EOF
}

# The AMI's config with its top-level root (the lines before the first table) set to the volume; a
# root key inside a table (e.g. a snapshotter's) is not containerd's data root and stays.
derived_config() {
  echo "# Written by llm-infra's configure_container_storage.sh: $AMI_CONFIG with root on the EBS volume."
  awk -v root="root = \"$DATA_ROOT\"" '
    !table && /^[ \t]*\[/ { if (!done) print root; done = 1; table = 1 }
    !table && /^[ \t]*root[ \t]*=/ { if (!done) print root; done = 1; next }
    { print }
    END { if (!done) print root }
  ' "$ROOT$AMI_CONFIG"
}

complete_config() {
  local runtime=runc binary=/usr/sbin/runc
  if [[ -e $ROOT$NVIDIA_RUNTIME ]]; then
    runtime=nvidia binary=$NVIDIA_RUNTIME
  fi
  cat <<EOF
# Written by llm-infra's configure_container_storage.sh: the AMI had no $AMI_CONFIG yet; this is
# what nodeadm writes for containerd (schema version 2), with root on the EBS volume.
version = 2
root = "$DATA_ROOT"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "$SANDBOX_IMAGE"
enable_cdi = true

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "$runtime"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$runtime]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$runtime.options]
BinaryName = "$binary"
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
EOF
}

# containerd: its own config on the volume, state copied there, a drop-in pointing containerd at it.
if [[ -f $ROOT$DROP_IN && -f $ROOT$CONFIG && "$(<"$ROOT$DROP_IN")" == "$(drop_in)" ]]; then
  say "containerd already runs from $CONFIG (data root $DATA_ROOT)"
else
  [[ -x $ROOT$CONTAINERD ]] || fail "no $CONTAINERD on this AMI; refusing to write a drop-in that starts it"
  mkdir -p "$ROOT$VOLUME/containerd"
  if [[ -f $ROOT$AMI_CONFIG ]]; then
    derived_config >"$ROOT$CONFIG.new"
    source_name="$AMI_CONFIG with root on the volume"
  else
    complete_config >"$ROOT$CONFIG.new"
    source_name="a complete config (no $AMI_CONFIG on the AMI yet)"
  fi
  if ! check=$("$ROOT$CONTAINERD" --config "$ROOT$CONFIG.new" config dump 2>&1 >/dev/null); then
    fail "containerd cannot load $CONFIG (from $source_name): ${check//$'\n'/ }"
  fi

  running=false
  if systemctl is-active --quiet containerd; then
    running=true
    systemctl stop containerd # a consistent copy of its database, and the new root once started
  fi
  rm -rf "$ROOT$DATA_ROOT" "$ROOT$DATA_ROOT.partial" # left over from an earlier root volume, if any
  if [[ -d $ROOT$AMI_STATE ]]; then
    cp -a "$ROOT$AMI_STATE" "$ROOT$DATA_ROOT.partial"
    mv "$ROOT$DATA_ROOT.partial" "$ROOT$DATA_ROOT"
  fi
  mv "$ROOT$CONFIG.new" "$ROOT$CONFIG"
  mkdir -p "$(dirname "$ROOT$DROP_IN")"
  drop_in >"$ROOT$DROP_IN"
  systemctl daemon-reload
  if [[ $running == true ]]; then
    systemctl start containerd
  fi
  say "containerd runs from $CONFIG ($source_name), data root $DATA_ROOT, via $DROP_IN"
fi

# kubelet: its directory becomes a link to the volume.
if [[ ! -L "$ROOT$KUBELET" ]]; then
  rm -rf "$ROOT$NEW_KUBELET" # left over from an earlier root volume, if any
  mkdir -p "$ROOT$NEW_KUBELET"
  if [[ -d "$ROOT$KUBELET" ]]; then
    cp -a "$ROOT$KUBELET/." "$ROOT$NEW_KUBELET/"
    rm -rf "$ROOT$KUBELET"
  fi
  ln -s "$NEW_KUBELET" "$ROOT$KUBELET"
  say "$KUBELET -> $NEW_KUBELET"
fi
