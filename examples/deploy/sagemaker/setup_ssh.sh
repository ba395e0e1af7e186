#!/bin/sh
# The ssh between the instances of a SageMaker job, written into the image (the Dockerfile runs
# `setup_ssh.sh /`): ROOT/etc/ssh gets sshd's host key, the job's key pair, the authorized keys
# (that key only), an sshd_config for root with that key and nothing else, and an ssh_config that
# uses the key and trusts any host key. Every instance runs the same image, so each can reach the
# others; only the instances of the job can reach each other at all (SageMaker's network).
# The paths inside the files are /etc/ssh/..., wherever ROOT is (a test binds ROOT/etc/ssh there).
#   setup_ssh.sh ROOT
set -eu
root=${1:?usage: setup_ssh.sh ROOT}
dir=$root/etc/ssh
mkdir -p "$dir"
rm -f "$dir/hvx_host_key" "$dir/hvx_host_key.pub" "$dir/hvx_job_key" "$dir/hvx_job_key.pub"
ssh-keygen -q -t ed25519 -N '' -C hvx-host -f "$dir/hvx_host_key"
ssh-keygen -q -t ed25519 -N '' -C hvx-job -f "$dir/hvx_job_key"
cp "$dir/hvx_job_key.pub" "$dir/hvx_authorized_keys"
cat >"$dir/sshd_config" <<'END'
# hvx: the leader instance starts ranks on the others (examples/deploy/sagemaker/setup_ssh.sh)
Port 22
HostKey /etc/ssh/hvx_host_key
AuthorizedKeysFile /etc/ssh/hvx_authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel ERROR
END
cat >"$dir/ssh_config" <<'END'
# hvx: the instances of one job reach each other with the image's job key; where the platform
# gives the job a key of its own (the MPI Operator's Secret at /root/.ssh), that key first.
Host *
    IdentityFile ~/.ssh/id_rsa
    IdentityFile ~/.ssh/id_ed25519
    IdentityFile /etc/ssh/hvx_job_key
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
END
chmod 600 "$dir/hvx_host_key" "$dir/hvx_job_key"
