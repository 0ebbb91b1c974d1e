<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\EventDispatcher;

/** The real class implements Psr\EventDispatcher\StoppableEventInterface. */
class Event {
	private bool $propagationStopped = false;

	public function __construct() {
	}

	public function stopPropagation(): void {
		$this->propagationStopped = true;
	}

	public function isPropagationStopped(): bool {
		return $this->propagationStopped;
	}
}
