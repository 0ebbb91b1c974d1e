<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Listener;

use OCA\Istota\Service\TalkEventForwarder;
use OCA\Talk\Events\BotInvokeEvent;
use OCP\EventDispatcher\Event;
use OCP\EventDispatcher\IEventListener;

/**
 * BotInvokeListener receives every in-process Talk bot invocation (Talk 21+) and hands
 * it to TalkEventForwarder, which keeps only ours. `instanceof` on a class that is not
 * loaded is simply false, so this class loads fine without Talk.
 *
 * @template-implements IEventListener<Event>
 */
class BotInvokeListener implements IEventListener {
	public function __construct(
		private readonly TalkEventForwarder $forwarder,
	) {
	}

	public function handle(Event $event): void {
		if ($event instanceof BotInvokeEvent) {
			$this->forwarder->forward($event);
		}
	}
}
