// What the tests need beyond the API: a log of every request (who made it, what it was, the code
// it got), and the faults a real apiserver cannot be made to produce on demand — a delay of every
// request (but the test's own, made as plegd-test-admin, so that it can look while plegd waits),
// taken inside the server's filters as a slow storage would take it, so that a slow request holds
// its max-in-flight seat; 500s or 409s for status writes, 500s for watches. Everything else (restarts, 429s
// from max-in-flight, 410s after compaction, precondition failures) comes from the real code.
//
//	GET    /plegd-test/requests   the log, oldest first, as JSON
//	DELETE /plegd-test/requests   clear it
//	PUT    /plegd-test/faults     {"delayMillis": 0, "statusPatch500": false, "failWatches": false,
//	                               "statusPatchConflicts": 0}
//
// The faults in force from the first request on come from $PLEGD_TEST_FAULTS (the same JSON): a
// server restarted by a test keeps them without a moment when a client could slip past them.
//
// These paths are served outside the authenticated chain; the server listens on loopback only.
package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

// The identity the tests observe with: never delayed.
const observer = "plegd-test-admin"

type loggedRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	User   string `json:"user"`
	Status int    `json:"status"`
	// When the response's status line was ready, in nanoseconds since the Unix epoch.
	AtNanos int64 `json:"atNanos"`
}

type faults struct {
	DelayMillis          int64 `json:"delayMillis"`
	StatusPatch500       bool  `json:"statusPatch500"`
	FailWatches          bool  `json:"failWatches"`
	StatusPatchConflicts int   `json:"statusPatchConflicts"`
}

type testHooks struct {
	mu     sync.Mutex
	log    []loggedRequest
	limit  int
	faults faults
	tokens *tokenAuthenticator
}

func newTestHooks(limit int, tokens *tokenAuthenticator) *testHooks {
	h := &testHooks{limit: limit, tokens: tokens}
	if initial := os.Getenv("PLEGD_TEST_FAULTS"); initial != "" {
		if err := json.Unmarshal([]byte(initial), &h.faults); err != nil {
			panic("PLEGD_TEST_FAULTS: " + err.Error())
		}
	}
	return h
}

type recordingWriter struct {
	http.ResponseWriter
	hooks *testHooks
	entry loggedRequest
	done  bool
}

func (w *recordingWriter) WriteHeader(code int) {
	w.record(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.record(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (and the apiserver's watch handlers) reach the connection.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recordingWriter) record(code int) {
	if w.done {
		return
	}
	w.done = true
	w.entry.Status = code
	w.entry.AtNanos = time.Now().UnixNano()
	w.hooks.mu.Lock()
	if len(w.hooks.log) < w.hooks.limit {
		w.hooks.log = append(w.hooks.log, w.entry)
	}
	w.hooks.mu.Unlock()
}

func (h *testHooks) user(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return ""
	}
	if id := h.tokens.lookup(strings.TrimSpace(token)); id != nil {
		return id.User
	}
	return "system:apiserver"
}

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	body, _ := json.Marshal(map[string]interface{}{"kind": "Status", "apiVersion": "v1", "metadata": map[string]string{},
		"status": "Failure", "message": message, "reason": reason, "code": code})
	_, _ = w.Write(body)
}

// wrap serves the hooks' own paths and puts the log and the faults in front of the apiserver.
func (h *testHooks) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/plegd-test/requests":
			h.mu.Lock()
			defer h.mu.Unlock()
			if r.Method == http.MethodDelete {
				h.log = nil
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(h.log)
			return
		case r.URL.Path == "/plegd-test/faults":
			var f faults
			if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h.mu.Lock()
			h.faults = f
			h.mu.Unlock()
			return
		}
		rw := &recordingWriter{ResponseWriter: w, hooks: h, entry: loggedRequest{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, User: h.user(r)}}
		defer rw.record(http.StatusOK)
		// The apiserver's watch and upgrade handlers need the connection's Flusher and Hijacker.
		w = responsewriter.WrapForHTTP1Or2(rw)
		h.mu.Lock()
		f := h.faults
		statusPatch := r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/status") && strings.Contains(r.URL.Path, "/pods/")
		conflict := statusPatch && h.faults.StatusPatchConflicts > 0
		if conflict {
			h.faults.StatusPatchConflicts--
		}
		h.mu.Unlock()
		switch {
		case statusPatch && f.StatusPatch500:
			writeStatus(w, http.StatusInternalServerError, "InternalError", "injected by the test: status writes fail")
		case conflict:
			writeStatus(w, http.StatusConflict, "Conflict", "injected by the test: Operation cannot be fulfilled on pods: the object has been modified; please apply your changes to the latest version and try again")
		case f.FailWatches && r.Method == http.MethodGet && r.URL.Query().Get("watch") != "" && r.URL.Query().Get("watch") != "false" && r.URL.Query().Get("watch") != "0":
			writeStatus(w, http.StatusInternalServerError, "InternalError", "injected by the test: watches fail")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// slow delays each request once it has passed the server's filters (authentication, max-in-flight,
// authorization), before the handler serves it: a slow storage, as seen from the client.
func (h *testHooks) slow(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		delay := time.Duration(h.faults.DelayMillis) * time.Millisecond
		h.mu.Unlock()
		// Inside the filters the bearer token is gone (authentication removes it): who it is, is in
		// the request's context.
		u, _ := genericapirequest.UserFrom(r.Context())
		if delay > 0 && (u == nil || u.GetName() != observer) {
			time.Sleep(delay)
		}
		next.ServeHTTP(w, r)
	})
}
