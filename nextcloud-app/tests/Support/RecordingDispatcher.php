<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\EventDispatcher\Event;
use OCP\EventDispatcher\IEventDispatcher;

/** Keeps dispatched events; $onDispatch plays a listener (Talk's, which may throw). */
final class RecordingDispatcher implements IEventDispatcher {
	/** @var list<Event> */
	public array $events = [];
	/** @var ?\Closure(Event): void */
	public ?\Closure $onDispatch = null;

	public function dispatchTyped(Event $event): void {
		$this->events[] = $event;
		if ($this->onDispatch !== null) {
			($this->onDispatch)($event);
		}
	}
}
