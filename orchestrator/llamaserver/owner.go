package llamaserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/go-connections/nat"
)

// Owner is who a managed server belongs to: the state directory of the
// agent that started it. Two users (or two checkouts with their own state
// directories) on one Docker engine each get their own server; neither's
// `llm up` or `llm down` touches the other's.
type Owner struct {
	// ID is a short hash of StateDir; it is part of the container name
	// and the LabelOwner value.
	ID string
	// StateDir is the absolute state directory, kept in LabelStateDir so a
	// refusal can say whose server is in the way.
	StateDir string
}

// OwnerOf is the owner of servers started with state directory dir.
func OwnerOf(dir string) Owner {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	sum := sha256.Sum256([]byte(dir))
	return Owner{ID: hex.EncodeToString(sum[:4]), StateDir: dir}
}

// ContainerName is the container name of instance for owner: BaseName-ID
// for the default server, BaseName-ID-INSTANCE for a named one. Without
// an owner the names are BaseName and BaseName-INSTANCE.
func ContainerName(owner Owner, instance string) string {
	n := BaseName
	if owner.ID != "" {
		n += "-" + owner.ID
	}
	if instance != "" {
		n += "-" + instance
	}
	return n
}

// Name is the container name of instance for this manager's owner.
func (m *Manager) Name(instance string) string { return ContainerName(m.Owner, instance) }

// ErrNotRunning is returned by Address when the server's container does
// not exist or does not run.
var ErrNotRunning = errors.New("the managed llama-server is not running")

// Address is the base URL of the running server of instance, read from
// the port the engine actually published (not from configuration: the
// server may have been started with --port).
func (m *Manager) Address(ctx context.Context, instance string) (string, error) {
	name := m.Name(instance)
	insp, err := m.eng.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("%w (no container %s)", ErrNotRunning, name)
	}
	if err != nil {
		return "", m.engineError("inspecting "+name, err)
	}
	if insp.Config == nil || insp.Config.Labels[LabelKind] != KindLLM {
		return "", fmt.Errorf("the container named %s was not created by agent", name)
	}
	if insp.State == nil || !insp.State.Running {
		return "", fmt.Errorf("%w (container %s has stopped: see `agent llm status`)", ErrNotRunning, name)
	}
	if p := publishedPort(insp.NetworkSettings); p > 0 {
		return URL(p), nil
	}
	if p, err := strconv.Atoi(insp.Config.Labels[LabelPort]); err == nil && p > 0 {
		return URL(p), nil
	}
	return "", fmt.Errorf("container %s publishes no port", name)
}

// publishedPort is the host port bound to llama-server's port.
func publishedPort(ns *container.NetworkSettings) int {
	if ns == nil {
		return 0
	}
	for _, b := range ns.Ports[nat.Port(strconv.Itoa(ContainerPort)+"/tcp")] {
		if p, err := strconv.Atoi(b.HostPort); err == nil && p > 0 {
			return p
		}
	}
	return 0
}

// foreignOnPort finds a managed server of another owner (or of no owner:
// one started by an older agent) that holds port. Up refuses to replace
// such a server unless forced: it may be another user's loaded model.
func (m *Manager) foreignOnPort(ctx context.Context, port int, self string) (*container.Summary, error) {
	list, err := m.eng.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelKind+"="+KindLLM),
		filters.Arg("label", LabelPort+"="+strconv.Itoa(port)),
	)})
	if err != nil {
		return nil, m.engineError("listing llama-server containers", err)
	}
	for i, c := range list {
		if c.Labels[LabelOwner] == m.Owner.ID && containerHasName(c, self) {
			continue
		}
		if c.Labels[LabelOwner] == m.Owner.ID && m.Owner.ID != "" {
			// Another instance of ours on the same port: ours to replace.
			continue
		}
		return &list[i], nil
	}
	return nil, nil
}

func containerHasName(c container.Summary, name string) bool {
	for _, n := range c.Names {
		if n == "/"+name || n == name {
			return true
		}
	}
	return false
}

// foreignError says whose server is in the way and how to proceed.
func foreignError(c *container.Summary, port int) error {
	whose := "an older agent (no owner recorded)"
	if d := c.Labels[LabelStateDir]; d != "" {
		whose = "the agent with state directory " + strconv.Quote(d)
	}
	name := c.ID
	if len(c.Names) > 0 {
		name = c.Names[0][1:]
	}
	return fmt.Errorf("port %d is held by the llama-server %s of %s, not this state directory's: pick another port with --port, or replace that server with --force", port, name, whose)
}
