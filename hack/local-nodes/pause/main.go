// Command pause is the local nodes' sandbox ("pause") image: it holds a pod's namespaces and
// does nothing until it is asked to stop.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
