// Graceful stop on SIGINT / SIGTERM: the first signal sets a flag that the training loop polls
// (finish the step, write a checkpoint, exit cleanly); a second signal exits immediately with
// status 128 + signal, as a shell reports a killed process.
#pragma once

namespace titan {

// Install the handlers (idempotent). The previous handlers are restored by
// uninstall_stop_handlers().
void install_stop_handlers();
void uninstall_stop_handlers();

// True once SIGINT or SIGTERM arrived (async-signal-safe flag).
bool stop_requested();
// The signal that requested the stop (0 when none).
int stop_signal();
// Clear the flag (tests; or a trainer that handled the request and continues).
void clear_stop_request();

}  // namespace titan
