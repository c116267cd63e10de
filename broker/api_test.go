package broker

import (
	"reflect"
	"testing"
)

// TestBrokerAPIHasNoCallbacks: gnet's callbacks are on the unexported
// events type, not part of Broker's API.
func TestBrokerAPIHasNoCallbacks(t *testing.T) {
	typ := reflect.TypeOf(&Broker{})
	for _, m := range []string{"OnBoot", "OnOpen", "OnTraffic", "OnClose", "OnTick", "OnShutdown"} {
		if _, ok := typ.MethodByName(m); ok {
			t.Errorf("Broker exports %s", m)
		}
		if _, ok := reflect.TypeOf(&events{}).MethodByName(m); !ok {
			t.Errorf("events lacks %s", m)
		}
	}
}
