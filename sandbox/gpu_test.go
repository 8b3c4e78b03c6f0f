package sandbox

import (
	"testing"

	"github.com/docker/docker/api/types/container"
)

// GPUs reach a sandbox only through Spec.DeviceRequests, and the rest of
// the hardening stays as it is.
func TestContainerConfigDeviceRequests(t *testing.T) {
	s := testSpec(t)
	_, hc, err := containerConfig(s, UserChoice{UID: 1000, GID: 1001})
	if err != nil || len(hc.DeviceRequests) != 0 {
		t.Fatalf("default spec: devices %+v, %v", hc.DeviceRequests, err)
	}
	s.DeviceRequests = []container.DeviceRequest{{Driver: "nvidia", Count: -1, Capabilities: [][]string{{"gpu"}}}}
	_, hc, err = containerConfig(s, UserChoice{UID: 1000, GID: 1001})
	if err != nil {
		t.Fatal(err)
	}
	if len(hc.DeviceRequests) != 1 || hc.DeviceRequests[0].Driver != "nvidia" || hc.DeviceRequests[0].Count != -1 {
		t.Errorf("requests %+v", hc.DeviceRequests)
	}
	if hc.Privileged || len(hc.Devices) != 0 || len(hc.CapAdd) != 0 || hc.NetworkMode != "none" || !hc.ReadonlyRootfs {
		t.Errorf("GPU access loosened the sandbox: %+v", hc)
	}
}
