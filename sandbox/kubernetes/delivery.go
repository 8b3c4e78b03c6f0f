package kubernetes

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/toolbox"
)

// Delivery puts a task's files into its pod. On one machine the Docker
// engine bind-mounts the host worktree (Spec.Workspace) at /workspace; a
// pod runs on a cluster node that cannot see it, so the files travel:
//
//   - from a bare mirror: the orchestrator pushes the task's base commit
//     to a per-repository mirror served inside the cluster, and an init
//     container clones it into an emptyDir mounted at /workspace (the
//     history for the git tools comes the same way, at
//     toolbox.HistoryPath). The work comes back as a git bundle the host
//     fetches over exec; host git runs only on that bundle, never on a
//     tree a pod can write.
//   - from a volume (PVC): a claim per task, filled by a job, mounted at
//     /workspace; the host never mounts it while a pod runs.
//
// Delivery is where either plugs into Create, without the orchestrator
// knowing. PVC is the volume form; the mirror form needs the
// orchestrator's push and bundle steps, which docs/kubernetes-backend.md
// describes.
type Delivery interface {
	// Workspace returns what mounts the files of spec at /workspace (and,
	// when it can, spec.History at toolbox.HistoryPath) in a pod running
	// as user.
	Workspace(spec sandbox.Spec, user sandbox.UserChoice) (WorkspaceMount, error)
}

// PVC delivers the workspace as an existing PersistentVolumeClaim.
type PVC struct {
	// Claim names the claim holding spec's files and the directory inside
	// it ("" for its root).
	Claim func(spec sandbox.Spec) (name, subPath string, err error)
}

var _ Delivery = PVC{}

const volumeWorkspace = "workspace"

// Workspace implements Delivery: the claim, read-only when
// Spec.WorkspaceReadOnly. The task's history is not on the claim, so the
// git tools of such a sandbox say there is none.
func (p PVC) Workspace(spec sandbox.Spec, _ sandbox.UserChoice) (WorkspaceMount, error) {
	if p.Claim == nil {
		return WorkspaceMount{}, errors.New("PVC delivery without a Claim function")
	}
	name, sub, err := p.Claim(spec)
	if err != nil {
		return WorkspaceMount{}, err
	}
	if name == "" {
		return WorkspaceMount{}, fmt.Errorf("no claim holds workspace %s", spec.Workspace)
	}
	return WorkspaceMount{
		Volumes: []corev1.Volume{{Name: volumeWorkspace, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: spec.WorkspaceReadOnly},
		}}},
		Mounts: []corev1.VolumeMount{{
			Name: volumeWorkspace, MountPath: toolbox.WorkspaceRoot, SubPath: sub, ReadOnly: spec.WorkspaceReadOnly,
		}},
	}, nil
}
