// One binary for the six Kubernetes commands of tests/cluster/cluster.sh, built from
// k8s.io/kubernetes: it links once instead of six times. It runs the command it is started as
// (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy or kubectl, through
// a symlink of that name) or the one its first argument names. A sixth, pod-status-served, is the parity
// test's: a pod status as kube-apiserver serves it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	_ "time/tzdata" // CronJob time zones, as kube-apiserver and kube-controller-manager link it

	v1 "k8s.io/api/core/v1"
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
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Each command as its own main runs it.
var commands = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl":                 kubectl,
	"pod-status-served":       podStatusServed,
}

// podStatusServed reads pod statuses, one JSON object a line, and writes each back on a line of
// its own as kube-apiserver serves it: decoded into k8s.io/api's v1.PodStatus and encoded by
// encoding/json, as its JSON serializer does (a Go struct field is never absent, an empty string
// under omitempty always is). tests/kubelet_parity.rs puts plegd's status into the form of the
// kubelet's with it, by Kubernetes' own types rather than by rules of its own.
func podStatusServed() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var status v1.PodStatus
		if err := json.Unmarshal(in.Bytes(), &status); err != nil {
			fmt.Fprintf(os.Stderr, "pod-status-served: not a pod status: %v\n", err)
			return 1
		}
		served, err := json.Marshal(&status)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pod-status-served: %v\n", err)
			return 1
		}
		out.Write(served)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			return 1
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "pod-status-served: %v\n", err)
		return 1
	}
	return 0
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
