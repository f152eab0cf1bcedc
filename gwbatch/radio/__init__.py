"""Radio transients: filterbank conditioning, dedispersion over a DM plan, and single pulses over
DM x time (issue 28).  Spectra are ``(channel, time)`` float32 arrays with their channel
frequencies in MHz, in the store's channel order; dispersion delays are referred to the highest
frequency (:mod:`gwbatch.radio.dedisperse`)."""
