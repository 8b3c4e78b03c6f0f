package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/localagent/agent/agent/llm"
)

// States a managed server can be in.
const (
	StateAbsent     = "absent"     // no container
	StateStopped    = "stopped"    // container exists, not running
	StateRestarting = "restarting" // llama-server keeps exiting
	StateStarting   = "starting"   // running, not listening yet
	StateLoading    = "loading"    // /health says 503
	StateReady      = "ready"      // /health says 200
	StateUnhealthy  = "unhealthy"  // running, /health answers something else
)

// Slot is one llama-server slot, from /slots.
type Slot struct {
	ID         int  `json:"id"`
	NCtx       int  `json:"n_ctx"`
	Processing bool `json:"is_processing"`
}

// Status is what `agent llm status` shows. Fields the server did not
// report are zero.
// Its JSON is `agent llm status --json`: every field is always present
// (StartedAt is replaced by a nullable one there).
type Status struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	State string `json:"state"`
	// Health is /health's message ("ok", "Loading model") or why it failed.
	Health   string `json:"health"`
	URL      string `json:"url"`
	Port     int    `json:"port"`
	Model    string `json:"model"`
	Image    string `json:"image"`
	Ctx      int    `json:"ctx"`
	Parallel int    `json:"parallel"`
	GPUs     string `json:"gpus"`
	// Backend is the image's llama-server backend (cpu, cuda, vulkan; ""
	// for an image not built here).
	Backend string `json:"backend"`
	// Offload is what the server's log says about devices, offloaded
	// layers and VRAM (read while it runs).
	Offload *Offload `json:"offload"`
	// Owner and StateDir say whose server this is.
	Owner    string `json:"owner"`
	StateDir string `json:"state_dir"`
	// Devices are the GPU devices the container was given, as the engine
	// records them ("nvidia: all", "nvidia: 0,1", "/dev/dri").
	Devices []string `json:"devices"`
	// TotalSlots and SlotCtx come from /props; BusySlots and Slots from
	// /slots.
	TotalSlots int    `json:"total_slots"`
	BusySlots  int    `json:"busy_slots"`
	SlotCtx    int    `json:"slot_ctx"`
	Slots      []Slot `json:"slots"`
	Build      string `json:"build"`
	// ExitCode and OOMKilled describe a stopped container.
	ExitCode  int       `json:"exit_code"`
	OOMKilled bool      `json:"oom_killed"`
	StartedAt time.Time `json:"started_at,omitzero"`
}

// Status inspects the server of instance and, when it runs, asks it for
// its health, slots and build.
func (m *Manager) Status(ctx context.Context, instance string) (*Status, error) {
	name := m.Name(instance)
	s := &Status{Name: name, State: StateAbsent}
	insp, err := m.eng.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return s, nil
	}
	if err != nil {
		return nil, m.engineError("inspecting "+name, err)
	}
	s.ID = insp.ID
	if insp.Config != nil {
		l := insp.Config.Labels
		if l[LabelKind] != KindLLM {
			return nil, fmt.Errorf("the container named %s was not created by agent", name)
		}
		s.Image, s.Model, s.GPUs = insp.Config.Image, l[LabelModel], l[LabelGPUs]
		s.Backend, s.Owner, s.StateDir = l[LabelBackend], l[LabelOwner], l[LabelStateDir]
		s.Port, _ = strconv.Atoi(l[LabelPort])
		s.Ctx, _ = strconv.Atoi(l[LabelCtx])
		s.Parallel, _ = strconv.Atoi(l[LabelParallel])
		if s.Port > 0 {
			s.URL = URL(s.Port)
		}
	}
	if insp.HostConfig != nil {
		s.Devices = devices(insp.HostConfig)
	}
	st := insp.State
	switch {
	case st == nil:
		s.State = StateStopped
		return s, nil
	case st.Restarting:
		s.State, s.ExitCode, s.OOMKilled = StateRestarting, st.ExitCode, st.OOMKilled
		return s, nil
	case !st.Running:
		s.State, s.ExitCode, s.OOMKilled = StateStopped, st.ExitCode, st.OOMKilled
		return s, nil
	}
	s.StartedAt, _ = time.Parse(time.RFC3339Nano, st.StartedAt)
	if p := publishedPort(insp.NetworkSettings); p > 0 && p != s.Port {
		s.Port, s.URL = p, URL(p)
	}
	if s.URL == "" {
		s.State = StateUnhealthy
		s.Health = "no port label on the container"
		return s, nil
	}
	c, err := llm.NewHTTP(llm.Options{BaseURL: s.URL, MaxRetries: -1})
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, err := c.ProbeHealth(hctx)
	switch {
	case err != nil:
		s.State, s.Health = StateStarting, err.Error()
		return s, nil
	case h.Loading:
		s.State, s.Health = StateLoading, h.Message
		return s, nil
	case !h.Ready:
		s.State, s.Health = StateUnhealthy, fmt.Sprintf("HTTP %d %s", h.StatusCode, h.Message)
		return s, nil
	}
	s.State, s.Health = StateReady, h.Message
	if off := m.readOffload(hctx, insp.ID); off.Known || len(off.Devices) > 0 || off.NoGPU || len(off.Backends) > 0 {
		s.Offload = &off
	}
	if p, err := c.Props(hctx); err == nil {
		s.TotalSlots, s.SlotCtx, s.Build = p.TotalSlots, p.NCtx, p.BuildInfo
	}
	if slots, err := fetchSlots(hctx, s.URL); err == nil {
		s.Slots = slots
		for _, sl := range slots {
			if sl.Processing {
				s.BusySlots++
			}
		}
		if s.TotalSlots == 0 {
			s.TotalSlots = len(slots)
		}
		if s.SlotCtx == 0 && len(slots) > 0 {
			s.SlotCtx = slots[0].NCtx
		}
	}
	return s, nil
}

// fetchSlots reads llama-server's /slots (absent when started with
// --no-slots; then only /props' totals are known).
func fetchSlots(ctx context.Context, base string) ([]Slot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/slots", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/slots: HTTP %d", resp.StatusCode)
	}
	var slots []Slot
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&slots); err != nil {
		return nil, fmt.Errorf("/slots: %w", err)
	}
	return slots, nil
}

func devices(hc *container.HostConfig) []string {
	var out []string
	for _, r := range hc.DeviceRequests {
		switch {
		case r.Count == -1:
			out = append(out, r.Driver+": all")
		case len(r.DeviceIDs) > 0:
			out = append(out, r.Driver+": "+strings.Join(r.DeviceIDs, ","))
		default:
			out = append(out, fmt.Sprintf("%s: %d", r.Driver, r.Count))
		}
	}
	for _, d := range hc.Devices {
		out = append(out, d.PathOnHost)
	}
	return out
}
