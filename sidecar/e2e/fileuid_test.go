package e2e

import (
	"os"
	"syscall"
)

func fileUID(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }
