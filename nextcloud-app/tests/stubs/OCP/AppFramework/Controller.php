<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework;

use OCP\IRequest;

abstract class Controller {
	protected $appName;
	protected $request;

	public function __construct($appName, IRequest $request) {
		$this->appName = $appName;
		$this->request = $request;
	}
}
