// Authentication: one bearer token per identity, read from a JSON file (again whenever the file
// changes, so that a test can add an identity to a running server). Each identity can
// carry what a real authenticator adds, such as the node-name claim of a bound service account token
// (`authentication.kubernetes.io/node-name` in the user's extra), which deploy/components/admission-policy/admission-policy.yaml
// checks. Every authenticated user is also in system:authenticated, as in kube-apiserver.
//
//	{"tokens": [{"token": "t1", "user": "system:serviceaccount:plegd-system:plegd",
//	  "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"],
//	  "extra": {"authentication.kubernetes.io/node-name": ["node-a"]}}]}
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
)

type tokenIdentity struct {
	Token  string              `json:"token"`
	User   string              `json:"user"`
	UID    string              `json:"uid"`
	Groups []string            `json:"groups"`
	Extra  map[string][]string `json:"extra"`
}

type tokenAuthenticator struct {
	path       string
	mu         sync.Mutex
	modified   time.Time
	identities []tokenIdentity
}

func loadTokens(path string) (*tokenAuthenticator, error) {
	a := &tokenAuthenticator{path: path}
	if path == "" {
		return a, nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	identities, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	a.identities, a.modified = identities, info.ModTime()
	return a, nil
}

func readTokens(path string) ([]tokenIdentity, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var file struct {
		Tokens []tokenIdentity `json:"tokens"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	for i, id := range file.Tokens {
		if id.Token == "" || id.User == "" {
			return nil, fmt.Errorf("token file %s: entry %d needs a token and a user", path, i)
		}
	}
	return file.Tokens, nil
}

func (a *tokenAuthenticator) lookup(token string) *tokenIdentity {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.path != "" {
		if info, err := os.Stat(a.path); err == nil && !info.ModTime().Equal(a.modified) {
			if identities, err := readTokens(a.path); err == nil {
				a.identities, a.modified = identities, info.ModTime()
			} else {
				klog.Errorf("%v; keeping the tokens read before", err)
			}
		}
	}
	for i := range a.identities {
		if subtle.ConstantTimeCompare([]byte(a.identities[i].Token), []byte(token)) == 1 {
			return &a.identities[i]
		}
	}
	return nil
}

func (a *tokenAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	id := a.lookup(token)
	if id == nil {
		return nil, false, nil
	}
	groups := append(append([]string{}, id.Groups...), user.AllAuthenticated)
	return &authenticator.Response{User: &user.DefaultInfo{Name: id.User, UID: id.UID, Groups: groups, Extra: id.Extra}}, true, nil
}
