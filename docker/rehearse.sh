#!/usr/bin/env bash
# A rehearsal of the AWS fleet on this machine, offline: the AWS emulator (moto), the stack
# deployed into it as `agenteval aws deploy` deploys it on AWS (and remembered as the stack
# profile `rehearsal`), and the Fargate stand-in (tests/aws/fake_fargate.py, part of agenteval's
# test kit) running every ECS task the fleet launches: workers as containers of the agenteval
# image (docker/build-local.sh builds it), or with --processes as processes of this machine's
# binary. Then, in another terminal, the commands of docs/operations.md work as they would on
# AWS once the environment below is exported:
#
#   docker/rehearse.sh [--port 4566] [--image agenteval:dev | --processes] [--agenteval BIN]
#
# It runs until Ctrl-C, then stops the stand-in and the emulator (the emulator's state goes with it).
# Needs: python3 with boto3 and moto[server] (`pip install 'moto[server]' boto3`), and Docker
# for --image or for tasks in their own images.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
port=4566
image="agenteval:dev"
mode=image
bin="$(command -v agenteval || true)"
stack=agenteval
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --image) image="$2"; mode=image; shift 2 ;;
    --processes) mode=processes; shift ;;
    --agenteval) bin="$2"; shift 2 ;;
    --stack) stack="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "rehearse.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "rehearse.sh: no agenteval binary: put it on PATH or pass --agenteval FILE" >&2
  exit 2
fi
if ! python3 -c 'import boto3, moto' 2>/dev/null || ! command -v moto_server >/dev/null; then
  echo "rehearse.sh: needs moto's server and boto3: pip install 'moto[server]' boto3" >&2
  exit 2
fi
if [ "$mode" = image ] && ! docker image inspect "$image" >/dev/null 2>&1; then
  echo "rehearse.sh: no image $image on this engine: docker/build-local.sh builds it (or use --processes)" >&2
  exit 2
fi

endpoint="http://127.0.0.1:$port"
export AWS_ENDPOINT_URL="$endpoint" AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export AWS_EC2_METADATA_DISABLED=true AGENTEVAL_STACK_PROFILE=rehearsal

pids=()
cleanup() {
  # The stand-in first (it stops its workers and removes its containers), then the emulator.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

moto_server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS "$endpoint/moto-api/" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$endpoint/moto-api/" >/dev/null || { echo "rehearse.sh: the emulator did not start on $endpoint" >&2; exit 4; }

# The account's network, as a VPC with a subnet and a security group for the workers.
read -r subnet vpc group < <(python3 - <<'EOF'
import boto3
ec2 = boto3.client("ec2")
s = ec2.describe_subnets()["Subnets"][0]
g = ec2.create_security_group(GroupName="agenteval-workers", Description="agenteval workers", VpcId=s["VpcId"])
print(s["SubnetId"], s["VpcId"], g["GroupId"])
EOF
)
# The model key the nightly config asks for: the environment's, else a stand-in value.
python3 - <<'EOF'
import os, boto3
boto3.client("secretsmanager").create_secret(Name="OPENAI_API_KEY", SecretString=os.environ.get("OPENAI_API_KEY") or "sk-rehearsal")
EOF

"$bin" aws deploy --stack "$stack" --profile rehearsal \
  --param "ImageUri=$image" --param "Subnets=$subnet" --param "SecurityGroups=$group" --param "VpcId=$vpc"
cluster="$("$bin" aws show --json | python3 -c 'import json,sys; print(next(s.split("=",1)[1] for s in json.load(sys.stdin)["settings"] if s.startswith("aws.cluster=")))')"

stats="$(mktemp -d)/stand-in.json"
stand_in=(python3 "$here/tests/aws/fake_fargate.py" --endpoint "$endpoint" --cluster "$cluster" --agenteval "$bin" --stats "$stats")
if [ "$mode" = image ]; then stand_in+=(--image "$image"); fi
"${stand_in[@]}" &
pids+=($!)
# It writes its first counts once it holds the cluster's tasks RUNNING until they end.
for _ in $(seq 600); do
  [ -s "$stats" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || { echo "rehearse.sh: the Fargate stand-in exited" >&2; exit 4; }
  sleep 0.1
done

cat <<EOF

The rehearsal is up: the emulator on $endpoint, stack $stack (stack profile \`rehearsal\`),
the Fargate stand-in running the cluster's tasks ($mode). In another terminal:

  export AWS_ENDPOINT_URL=$endpoint AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AGENTEVAL_STACK_PROFILE=rehearsal
  agenteval doctor --config configs/toy-aws.yaml
  agenteval submit --backend aws --config configs/toy-aws.yaml --set benchmark.size=20
  agenteval runs list --backend aws

Ctrl-C stops it.
EOF
wait "${pids[-1]}"
