//go:build poll_opt

package netpoll

// haraqa: this copy of gnet changes only the default epoll loop
// (poller_epoll_default.go; see README.md at the root of this module). The
// poll_opt loop (poller_epoll_ultimate.go) still yields to the scheduler
// before every wait, waking another thread per lone request, so a build with
// -tags poll_opt is refused here rather than left silently unpatched.
var _ int = "haraqa: build without -tags poll_opt; its gnet epoll loop is not patched (broker/third_party/gnet/README.md)"
