<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The personal settings section: a mount point for js/istota-personal-settings.mjs (its
 * styles are inlined in the script). The page's data comes from the initial state
 * "settings" and the app's OCS API.
 */

\OCP\Util::addScript('istota', 'istota-personal-settings');
?>
<div id="istota-personal-settings"></div>
