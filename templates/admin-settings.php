<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The administration section: a mount point for js/istota-admin-settings.mjs (its styles
 * are inlined in the script). The page's data comes from the initial state "settings"
 * and the app's admin-only OCS API.
 */

\OCP\Util::addScript('istota', 'istota-admin-settings');
?>
<div id="istota-admin-settings"></div>
