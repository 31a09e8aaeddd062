// Starts the web app once every view has registered itself (the scripts load in order).
"use strict";
window.Hermit.start();
