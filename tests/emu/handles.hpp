// The emulator's record of live handles (streams, events, library handles), as the driver keeps
// its handles: what a program never destroys stays reachable, so handles a program leaves at exit
// (in static maps destroyed first, say) are not reported as its leaks.
#pragma once

namespace meld_emu {
void keep_handle(const void* h);
void drop_handle(const void* h);
}  // namespace meld_emu
