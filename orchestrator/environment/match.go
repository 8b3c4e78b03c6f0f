package environment

import (
	"path"
	"syscall"
)

func pathMatch(pattern, name string) (bool, error) { return path.Match(pattern, name) }

const syscallNoFollow = syscall.O_NOFOLLOW
