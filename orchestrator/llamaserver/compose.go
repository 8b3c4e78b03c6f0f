package llamaserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/localagent/agent/compose"
)

// Stack describes the same server as Spec, for the compose file.
func Stack(o Options, img ImageFacts, host HostFacts) compose.Stack {
	cfg, hc := Spec(o, img, host)
	s := compose.Stack{
		Image:         o.Image,
		Command:       cfg.Cmd,
		ContainerPort: ContainerPort,
		HostPort:      o.Port,
		ModelDir:      filepath.Dir(o.modelFile()),
		ModelTarget:   ModelDir,
		User:          cfg.User,
		Labels:        map[string]string{},
		StartPeriod:   fmt.Sprintf("%ds", int(o.timeout().Seconds())),
	}
	if hc.PidsLimit != nil {
		s.PidsLimit = *hc.PidsLimit
	}
	// The settings hash describes a container made by `agent llm up`; a
	// compose-made one must not be mistaken for it.
	for k, v := range cfg.Labels {
		if k != LabelSettings {
			s.Labels[k] = v
		}
	}
	switch o.GPUs.Mode {
	case GPUNvidia:
		s.GPU.NVIDIA = true
		if !o.GPUs.All {
			s.GPU.IDs = o.GPUs.IDs
		}
	case GPUAMD:
		for _, d := range hc.Devices {
			s.GPU.Devices = append(s.GPU.Devices, d.PathOnHost)
		}
		s.GPU.GroupAdd = hc.GroupAdd
	}
	return s
}

func (o Options) timeout() time.Duration {
	if o.StartTimeout <= 0 {
		return DefaultStartTimeout
	}
	return o.StartTimeout
}

// Facts gathers what Spec needs from the engine and the host, with the
// same checks Up makes (image present, devices exist). The model path is
// made absolute in the returned Options.
func (m *Manager) Facts(ctx context.Context, o Options) (Options, ImageFacts, HostFacts, error) {
	if err := o.ResolveModel(); err != nil {
		return o, ImageFacts{}, HostFacts{}, err
	}
	img, err := m.imageFacts(ctx, o.Image)
	if err != nil {
		return o, img, HostFacts{}, err
	}
	gf := GPUFacts{ImageBackend: img.Backend}
	if o.GPUs.Mode == GPUAuto {
		gf.Runtime = m.GPURuntime(ctx)
		gf.GPUImage, gf.GPUImageBackend = m.gpuImage(ctx)
	}
	chosen, err := ResolveGPUs(o, gf)
	if err != nil {
		return o, img, HostFacts{}, err
	}
	if chosen.Image != o.Image {
		if img, err = m.imageFacts(ctx, chosen.Image); err != nil {
			return o, img, HostFacts{}, err
		}
	}
	o = chosen
	host, err := m.hostFacts(o)
	return o, img, host, err
}

// DefaultHostFacts are the host facts without an engine: the caller's
// user (or, for root, the model's owner).
func DefaultHostFacts(model string) HostFacts {
	h := HostFacts{UID: os.Getuid(), GID: os.Getgid()}
	if h.UID == 0 {
		h.UID, h.GID = rootRunAs(model)
	}
	return h
}
