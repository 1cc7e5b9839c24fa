// One binary for the five Kubernetes commands of tests/cluster/cluster.sh, built from
// k8s.io/kubernetes: it links once instead of five times. It runs the command it is started as
// (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kubectl, through a symlink
// of that name) or the one its first argument names.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	_ "time/tzdata" // CronJob time zones, as kube-apiserver and kube-controller-manager link it

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's credential plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Each command as its own main runs it.
var commands = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kubectl":                 kubectl,
}

func kubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func main() {
	run, ok := commands[filepath.Base(os.Args[0])]
	if !ok && len(os.Args) > 1 {
		if run, ok = commands[os.Args[1]]; ok {
			// The command sees its own arguments as if started by its name.
			os.Args = os.Args[1:]
		}
	}
	if !ok {
		names := make([]string, 0, len(commands))
		for name := range commands {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: %s COMMAND [ARGS...], or a symlink named COMMAND; COMMAND is one of %s\n",
			filepath.Base(os.Args[0]), strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}
