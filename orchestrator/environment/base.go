package environment

import (
	"context"
	"fmt"
	"slices"

	"github.com/docker/docker/api/types/image"

	"github.com/localagent/agent/policy"
	"github.com/localagent/agent/sandbox"
)

// BaseRefusedError says that a repository's definition names a base image
// its user has not allowed. The base decides what the model can read (an
// application image may hold tokens or code of its own), so it is the
// user's choice, like the sandbox image.
type BaseRefusedError struct{ Base string }

func (e *BaseRefusedError) Error() string {
	return fmt.Sprintf("%s names the base image %q, which you have not allowed: a repository may only choose the configured sandbox image, images agent built (`agent images list`) or the images listed in env.bases of your own config (%s); add it there if you trust this repository's choice", File, e.Base, "~/.config/agent/config.yaml")
}

// builtKinds are the LabelImage values of the images agent builds for
// sandboxes; a repository may use them as its base.
var builtKinds = []string{"sandbox", "busybox"}

// checkBase refuses a base that the definition's author may not choose:
// anything but the configured sandbox image, the default image, an image
// this tool built for sandboxes, or one of the user's allowed bases.
// Names are compared by the image they resolve to, so another spelling
// of an allowed image is allowed and a re-tagged forbidden one is not.
func (b *Builder) checkBase(ctx context.Context, req *Request, base string, bi image.InspectResponse) error {
	if req.Trusted || req.Def.Base == "" {
		return nil
	}
	if bi.Config != nil && slices.Contains(builtKinds, bi.Config.Labels[policy.LabelImage]) {
		return nil
	}
	allowed := append([]string{req.Sandbox.Image, sandbox.DefaultImage}, req.Bases...)
	for _, a := range allowed {
		if a == "" {
			continue
		}
		if a == base {
			return nil
		}
		ai, err := b.Docker.ImageInspect(ctx, a)
		if err == nil && ai.ID == bi.ID {
			return nil
		}
	}
	return &BaseRefusedError{Base: base}
}
